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
    from vidspec.decoding.loops.chain import SpeculativeDecoder

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


@pytest.fixture(scope="module")
def whole(tmp_path_factory, synthvid) -> Path:
    """An uninterrupted run, the reference for the crash tests."""
    out = tmp_path_factory.mktemp("whole") / "out"
    assert _distill(synthvid, out) == 0
    return out


def _leftovers(out: Path) -> list[str]:
    """Files that look like temporary files of the writer (``.<name>.<8 hex>``)."""
    import re

    temp = re.compile(r"\.(shard-\d+\.jsonl|config\.json|distill\.json)\.[0-9a-f]{8}")
    return sorted(str(p.relative_to(out)) for p in out.rglob(".*") if temp.fullmatch(p.name))


def _assert_same_as_whole(out: Path, whole: Path) -> None:
    assert _rows(out) == _rows(whole)
    assert {k: v[2] for k, v in _shards(out).items()} == {k: v[2] for k, v in _shards(whole).items()}
    assert (out / "distill.json").read_text() == (whole / "distill.json").read_text()
    assert _leftovers(out) == []


def test_distill_data_reruns_exactly_after_a_kill_mid_shard(tmp_path, synthvid, whole, generate_calls, capsys):
    """A SIGKILL while writing runs no cleanup: it leaves a truncated temporary file, and a writer without
    fsync can leave a truncated shard under its final name after a power loss. The rerun removes the first
    (and nothing that only looks like it) and answers the second's rows again."""
    calls, fail_at = generate_calls
    out = tmp_path / "out"
    fail_at[0] = 4  # shard 0 finished
    assert _distill(synthvid, out) == 130
    capsys.readouterr()
    train, ref = out / ".work" / "train", whole / ".work" / "train"
    half = ref.joinpath("shard-00001.jsonl").read_bytes()
    (train / ".shard-00001.jsonl.0123abcd").write_bytes(half[: len(half) // 2])
    (out / ".work" / ".config.json.89abcdef").write_text('{"target": ')
    first_line = ref.joinpath("shard-00002.jsonl").read_text().splitlines()[0]
    (train / "shard-00002.jsonl").write_text(first_line + "\n")  # whole lines, one row short
    keep = [train / ".shard-00001.jsonl.0123abcd.bak", train / ".shard-00001.jsonl.notes", out / "notes.txt"]
    for p in keep:
        p.write_text("not the writer's\n")
    assert _leftovers(out) == [".work/.config.json.89abcdef", ".work/train/.shard-00001.jsonl.0123abcd"]

    calls.clear()
    fail_at[0] = 0
    assert _distill(synthvid, out) == 0
    assert len(calls) == ROWS - SHARD  # shards 1 and 2 answered again, shard 0 kept
    _assert_same_as_whole(out, whole)
    assert all(p.read_text() == "not the writer's\n" for p in keep)


def test_distill_data_removes_a_torn_shard_when_writing_fails(tmp_path, synthvid, whole, generate_calls, monkeypatch,
                                                               capsys):
    """Ctrl-C after half of shard 1's bytes reached its temporary file: no shard 1, no temporary file."""
    from vidspec.draft_training.sparrow import distill_data as module

    calls, _ = generate_calls
    torn: list[bytes] = []
    tear = [True]

    def torn_open(path, mode="r", **kwargs):
        f = open(path, mode, **kwargs)
        if tear[0] and Path(path).name.startswith(".shard-00001.jsonl."):
            def write(text):
                f.buffer.write(text[: len(text) // 2].encode())
                f.flush()
                torn.append(Path(path).read_bytes())
                raise KeyboardInterrupt
            f.write = write
        return f

    out = tmp_path / "out"
    monkeypatch.setattr(module, "open", torn_open, raising=False)
    assert _distill(synthvid, out) == 130
    assert "interrupted" in capsys.readouterr().err
    assert len(torn) == 1 and 0 < len(torn[0]) < len((whole / ".work/train/shard-00001.jsonl").read_bytes())
    assert list(_shards(out)) == [".work/train/shard-00000.jsonl"] and _leftovers(out) == []
    assert not (out / "distill.json").exists()

    tear[0] = False
    calls.clear()
    assert _distill(synthvid, out) == 0
    assert len(calls) == ROWS - SHARD
    _assert_same_as_whole(out, whole)


def test_shards_are_disjoint_cover_every_row_and_merge_to_the_whole_run(tmp_path, synthvid, generate_calls, capsys):
    from vidspec.draft_training.sparrow.distill_data import chunks_of_shard

    # the assignment: disjoint, complete, fixed by (rows, shard_size, n)
    for rows, size, n in ((6, 2, 2), (7, 2, 3), (1, 4, 4)):
        parts = [chunks_of_shard(rows, size, (i, n)) for i in range(n)]
        flat = sorted(c for p in parts for c in p)
        assert flat == list(range(-(-rows // size))) and len(flat) == len(set(flat))

    calls, _ = generate_calls
    whole = tmp_path / "whole"
    assert _distill(synthvid, whole) == 0
    calls.clear()
    out = tmp_path / "sharded"
    args = ["distill-data", "--target", TARGET, "--dataset", str(synthvid), "--out", str(out), "--max-new-tokens", "6",
            "--shard-size", str(SHARD)]
    assert vidspec([*args, "--shard", "1/2"]) == 0
    assert len(calls) == 2  # chunk 1 of 3 (rows 2-3)
    assert not (out / "distill.json").exists()
    assert vidspec([*args, "--merge", "true"]) == 2  # chunks 0 and 2 are not done yet
    assert "shard-00000" in capsys.readouterr().err
    assert vidspec([*args, "--shard", "0/2"]) == 0
    assert len(calls) == ROWS
    assert vidspec([*args, "--shard", "0/2"]) == 0  # a finished shard resumes to nothing
    assert len(calls) == ROWS
    assert vidspec([*args, "--merge", "true"]) == 0
    assert _rows(out) == _rows(whole)
    assert json.loads((out / "distill.json").read_text())["target_family"] == "qwen2.5-vl"
    assert vidspec([*args, "--shard", "2/2"]) == 2  # i must be below n


@pytest.mark.parametrize("target", ["tiny-qwen2.5-vl", "tiny-llava-ov"])
def test_batched_answers_equal_one_at_a_time(tmp_path, synthvid, target):
    args = ["distill-data", "--target", target, "--dataset", str(synthvid), "--max-new-tokens", "6",
            "--shard-size", "4", "--progress", "false"]
    assert vidspec([*args, "--out", str(tmp_path / "one")]) == 0
    assert vidspec([*args, "--out", str(tmp_path / "batched"), "--batch-size", "3"]) == 0
    one, batched = _rows(tmp_path / "one"), _rows(tmp_path / "batched")
    assert [r["answer"] for r in batched] == [r["answer"] for r in one]
    assert all(r["answer"] for r in batched)
