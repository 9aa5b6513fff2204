"""benchmarks/long_ab.py: two Sparrow drafts of one target on the long-video bar, in one process, on tiny models."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from long_ab import main, ratio_difference, tau_differences  # noqa: E402

from vidspec.evaluation.records import read_jsonl  # noqa: E402


@pytest.fixture(scope="module")
def long_set(tmp_path_factory):
    from vidspec.evaluation.synthvid import SynthVidConfig, generate_synthvid

    return generate_synthvid(tmp_path_factory.mktemp("long") / "sv", SynthVidConfig(
        num_videos=2, seed=2, preset="easy", size="64x64", frames=16, split="validation", mcq_per_video=0,
        open_per_video=0), progress=False)


def releases(root: Path) -> tuple[str, str]:
    """Two random-weight Sparrow releases (seeds 0 and 1) for the tiny Qwen2.5-VL target."""
    from vidspec.decoding.models import load_target
    from vidspec.decoding.sparrow import new_sparrow_for, target_fingerprint

    target = load_target("tiny-qwen2.5-vl")
    out = []
    for seed in (0, 1):
        model = new_sparrow_for(target, seed=seed)
        out.append(str(model.save_pretrained(root / f"sparrow{seed}",
                                             manifest={"target_fingerprint": target_fingerprint(target)})))
    return out[0], out[1]


@pytest.mark.parametrize("engine", ["eager", "fast"])
def test_two_drafts_share_the_baseline_and_each_read(long_set, tmp_path, monkeypatch, capsys, engine):
    from vidspec.decoding.testing import count_video_reads

    reads = count_video_reads(monkeypatch)
    a, b = releases(tmp_path)
    out = tmp_path / "ab"
    argv = ["--target", "tiny-qwen2.5-vl", "--sparrow-a", a, "--sparrow-b", b, "--data", str(long_set),
            "--frames", "4,16", "--limit", "2", "--engine", engine, "--max-new-tokens", "8", "--out", str(out)]
    assert main(argv) == 0
    assert len(reads) == 2 * 2  # each video read once per length, for both drafts and AR
    for f in (4, 16):
        ra, rb = (read_jsonl(out / d / f"eval-long{f}" / "records.jsonl") for d in ("a", "b"))
        ar_a = {r["sample_id"]: r for r in ra if r["method"] == "ar"}
        ar_b = {r["sample_id"]: r for r in rb if r["method"] == "ar"}
        assert ar_a == ar_b and len(ar_a) == 2  # B is measured against A's AR decodes
        for r in rb:
            if r["method"] == "sparrow":  # lossless with either draft
                assert r["token_ids"] == ar_b[r["sample_id"]]["token_ids"] and r["rounds"]
        assert json.loads((out / "b" / f"eval-long{f}" / "config.json").read_text())["sparrow"] == b
    doc = json.loads((out / "long_ab.json").read_text())
    ratio = {d: doc[d]["bar"]["ratio"] for d in ("a", "b")}
    assert doc["b_minus_a"]["difference"] == pytest.approx(ratio["b"] - ratio["a"])
    assert doc["b_minus_a"]["videos"] == 2 and doc["machine"]["device"] == "cpu"
    assert (out / "a" / "long_tau.png").is_file() and (out / "b" / "long_tau.png").is_file()
    assert "B - A:" in capsys.readouterr().out
    # rerun: every record is there, nothing is decoded or added
    reads.clear()
    assert main(argv) == 0
    assert reads == [] and len(read_jsonl(out / "b" / "eval-long16" / "records.jsonl")) == 4


def test_ratio_difference_is_paired():
    def doc(short: list[float], long_: list[float]) -> dict:
        return {"lengths": {"64": {"per_video": {str(i): {"tau": t} for i, t in enumerate(short)}},
                            "1536": {"per_video": {str(i): {"tau": t} for i, t in enumerate(long_)}}}}

    same = doc([8.0, 4.0, 6.0], [6.0, 4.0, 3.0])
    d = ratio_difference(same, same)
    assert d["difference"] == 0 and d["ci95"] == [0, 0] and d["share_b_higher"] == 0
    better = doc([8.0, 4.0, 6.0], [8.0, 4.0, 6.0])
    d = ratio_difference(same, better, draws=2000)
    # B never loses a draw; it ties only where a draw holds video 1 alone (τ 4 at both lengths for both drafts)
    assert d["difference"] == pytest.approx(1 - 13 / 18) and 0.9 < d["share_b_higher"] < 1.0
    assert d["ci95"][0] >= 0 < d["ci95"][1]


def test_same_caption_difference_keeps_only_the_videos_given():
    def doc(short: list[float], long_: list[float]) -> dict:
        return {"lengths": {"64": {"per_video": {str(i): {"tau": t} for i, t in enumerate(short)}},
                            "1536": {"per_video": {str(i): {"tau": t} for i, t in enumerate(long_)}}}}

    # over all three videos B's ratio is the higher; on videos 0 and 2 (say, those captioned alike) A's is
    a, b = doc([8.0, 8.0, 8.0], [8.0, 2.0, 8.0]), doc([8.0, 8.0, 8.0], [6.0, 8.0, 6.0])
    assert ratio_difference(a, b, draws=200)["difference"] == pytest.approx(20 / 24 - 18 / 24)
    d = ratio_difference(a, b, draws=200, only={"0", "2"})
    assert d["videos"] == 2 and d["difference"] == pytest.approx(-0.25) and d["share_b_higher"] == 0


def test_tau_differences_say_at_which_length_b_lost():
    def doc(short: list[float], long_: list[float]) -> dict:
        return {"lengths": {"64": {"per_video": {str(i): {"tau": t} for i, t in enumerate(short)}},
                            "1536": {"per_video": {str(i): {"tau": t} for i, t in enumerate(long_)}}}}

    # B's ratio is the higher (1.0 against 0.75) because it lost 2 of τ at 64 frames and held τ at 1536
    a, b = doc([8.0, 8.0, 8.0], [6.0, 6.0, 6.0]), doc([6.0, 6.0, 6.0], [6.0, 6.0, 6.0])
    assert ratio_difference(a, b)["difference"] == pytest.approx(0.25)
    d = tau_differences(a, b, draws=500)
    assert d["64"]["difference"] == -2.0 and d["64"]["ci95"] == [-2.0, -2.0] and d["64"]["share_b_higher"] == 0
    assert d["1536"]["difference"] == 0.0 and d["1536"]["share_b_higher"] == 0


def test_analyse_only_reads_the_runs_without_models(long_set, tmp_path, capsys):
    a, b = releases(tmp_path)
    out = tmp_path / "ab"
    argv = ["--frames", "4,16", "--out", str(out)]
    assert main(["--target", "tiny-qwen2.5-vl", "--sparrow-a", a, "--sparrow-b", b, "--data", str(long_set),
                 "--limit", "2", "--engine", "eager", "--max-new-tokens", "8", *argv]) == 0
    first = json.loads((out / "long_ab.json").read_text())
    for run in out.glob("*/eval-long*"):  # as committed: gzipped records
        plain = run / "records.jsonl"
        (run / "records.jsonl.gz").write_bytes(gzip.compress(plain.read_bytes()))
        plain.unlink()
    capsys.readouterr()
    assert main(["--analyse-only", *argv]) == 0
    again = json.loads((out / "long_ab_analysis.json").read_text())
    assert again["b_minus_a"] == first["b_minus_a"] and again["a"]["sparrow"] == a
    assert set(again["b_minus_a"]["tau"]) == {"4", "16"}
    same = set(again["a"]["same_text_videos"]) & set(again["b"]["same_text_videos"])
    assert ("same_caption" in again["b_minus_a"]) == bool(same)
    if same:
        assert again["b_minus_a"]["same_caption"]["videos"] == len(same)
    assert "B - A, mean tau at 16 frames" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:  # without --analyse-only the models are required
        main(argv)
    assert e.value.code == 2


def test_a_missing_release_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["--target", "tiny-qwen2.5-vl", "--sparrow-a", str(tmp_path / "none"), "--sparrow-b", str(tmp_path),
              "--data", str(tmp_path), "--out", str(tmp_path / "o")])
    assert e.value.code == 2 and "not a Sparrow release" in capsys.readouterr().err
