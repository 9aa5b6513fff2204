"""``vidspec distill-data`` end to end: a tiny target answers a tiny SynthVid set; an interrupted run resumes exactly."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from vidspec.decoding.cli import main as vidspec

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TARGET = "tiny-qwen2.5-vl"
ROWS = 6  # 3 videos x 2 captions
SHARD = 2


@pytest.fixture(scope="module")
def synthvid(tmp_path_factory) -> Path:
    synth = pytest.importorskip("vidspec.evaluation.synthvid")
    cfg = synth.SynthVidConfig(num_videos=3, seed=4, preset="easy", frames=4, size="64x64", split="train",
                               styles="alpha:1,beta:1", captions_per_video=2, mcq_per_video=0, open_per_video=0)
    return synth.generate_synthvid(tmp_path_factory.mktemp("sv") / "sv", cfg, progress=False)


def _distill(data: Path, out: Path) -> int:
    return vidspec(["distill-data", "--target", TARGET, "--dataset", str(data), "--out", str(out),
                    "--max-new-tokens", "6", "--shard-size", str(SHARD)])


@pytest.fixture
def generate_calls(monkeypatch):
    """Counts target answers; ``fail_at[0] = n`` makes answer n raise KeyboardInterrupt (Ctrl-C)."""
    from vidspec.decoding.engine import SpeculativeDecoder

    real = SpeculativeDecoder.generate
    calls: list[str] = []
    fail_at = [0]

    def generate(self, request, *args, **kwargs):
        calls.append(request.prompt)
        if len(calls) == fail_at[0]:
            raise KeyboardInterrupt
        return real(self, request, *args, **kwargs)

    monkeypatch.setattr(SpeculativeDecoder, "generate", generate)
    return calls, fail_at


def _shards(out: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every finished shard with its inode, mtime and bytes (a rewrite changes at least one)."""
    return {str(p.relative_to(out)): (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted((out / ".work").rglob("shard-*.jsonl"))}


def _rows(out: Path) -> list[dict]:
    from datasets import load_from_disk

    return load_from_disk(str(out))["train"].to_list()


def test_distill_data_resumes_an_interrupted_run_exactly(tmp_path, synthvid, generate_calls, capsys):
    calls, fail_at = generate_calls
    whole = tmp_path / "whole"
    assert _distill(synthvid, whole) == 0
    assert len(calls) == ROWS
    want = _rows(whole)
    assert len(want) == ROWS
    manifest = json.loads((whole / "distill.json").read_text())
    assert manifest["rows"] == {"train": ROWS} and manifest["target"] == TARGET

    from datasets import load_from_disk

    source = load_from_disk(str(synthvid))["train"].to_list()
    for got, src in zip(want, source):
        assert got["reference_answer"] == src["answer"] and got["question"] == src["question"]
        assert got["videoID"] == src["videoID"] and got["pieces"] == src["pieces"]  # other columns kept
        assert Path(got["video"]).is_absolute() and Path(got["video"]).is_file()
        assert 1 <= got["answer_tokens"] <= 6 and isinstance(got["answer"], str)

    # Interrupted (Ctrl-C) during the 4th answer: shard 0 (rows 0-1) is on disk, shard 1 is not.
    resumed = tmp_path / "resumed"
    calls.clear()
    fail_at[0] = 4
    assert _distill(synthvid, resumed) == 130
    assert "interrupted" in capsys.readouterr().err
    before = _shards(resumed)
    assert list(before) == [".work/train/shard-00000.jsonl"]
    assert not (resumed / "distill.json").exists() and not (resumed / "dataset_dict.json").exists()

    # The rerun answers only the rows of unfinished shards and leaves the finished one untouched.
    calls.clear()
    fail_at[0] = 0
    assert _distill(synthvid, resumed) == 0
    assert len(calls) == ROWS - SHARD
    after = _shards(resumed)
    assert after[".work/train/shard-00000.jsonl"] == before[".work/train/shard-00000.jsonl"]
    assert len(after) == ROWS // SHARD

    # The result equals the uninterrupted run's, shard files byte for byte.
    assert _rows(resumed) == want
    assert {k: v[2] for k, v in after.items()} == {k: v[2] for k, v in _shards(whole).items()}
    assert json.loads((resumed / "distill.json").read_text()) == manifest

    # A rerun of a finished run answers nothing and rewrites no shard.
    calls.clear()
    assert _distill(synthvid, resumed) == 0
    assert calls == [] and _shards(resumed) == after and _rows(resumed) == want


def test_distill_data_refuses_other_options_on_an_unfinished_run(tmp_path, synthvid, generate_calls, capsys):
    calls, fail_at = generate_calls
    out = tmp_path / "out"
    fail_at[0] = 2
    assert _distill(synthvid, out) == 130
    code = vidspec(["distill-data", "--target", TARGET, "--dataset", str(synthvid), "--out", str(out),
                    "--max-new-tokens", "7", "--shard-size", str(SHARD)])
    assert code == 2 and "other options" in capsys.readouterr().err
