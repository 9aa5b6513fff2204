"""``vidspec sparrow-features`` after a crash: a rerun gives the uninterrupted run's cache, byte for byte.

The tiny target over the tiny dataset's 8 train captions, 2 per batch, so 4 target passes.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from vidspec.decoding.cli import main as vidspec

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TARGET = "tiny-qwen2.5-vl"
ROWS, BATCH = 8, 2


def _features(data: Path, out: Path) -> int:
    return vidspec(["sparrow-features", "--target", TARGET, "--data", str(data), "--out", str(out),
                    "--batch-size", str(BATCH), "--device", "cpu"])


def _entries(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.safetensors"))}


def _stats(out: Path) -> dict[str, tuple[int, int]]:
    """Inode and mtime of every entry (a rewrite changes at least one)."""
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in sorted(out.glob("*.safetensors"))}


def _hidden(out: Path) -> list[str]:
    """Dot files: the command's temporary files are the only ones it makes."""
    return sorted(p.name for p in out.iterdir() if p.name.startswith("."))


def _assert_same_as_whole(out: Path, whole: Path) -> None:
    assert _entries(out) == _entries(whole)
    assert (out / "features.json").read_bytes() == (whole / "features.json").read_bytes()
    assert not (out / "features.partial.json").exists()


@pytest.fixture(scope="module")
def whole(tmp_path_factory, tiny_dataset) -> Path:
    """An uninterrupted run, the reference."""
    out = tmp_path_factory.mktemp("whole") / "feats"
    assert _features(tiny_dataset, out) == 0
    assert len(_entries(out)) == ROWS and (out / "features.json").is_file()
    assert not (out / "features.partial.json").exists() and _hidden(out) == []
    return out


@pytest.fixture
def passes(monkeypatch):
    """Keys of each target pass; ``fail_at[0] = n`` makes pass n raise KeyboardInterrupt (Ctrl-C)."""
    from vidspec.draft_training.sparrow.features import sample_keys
    from vidspec.draft_training.sparrow.module import SparrowDistillModule

    real = SparrowDistillModule.target_features
    calls: list[list[str]] = []
    fail_at = [0]

    def target_features(self, batch):
        calls.append(sample_keys(batch))
        if len(calls) == fail_at[0]:
            raise KeyboardInterrupt
        return real(self, batch)

    monkeypatch.setattr(SparrowDistillModule, "target_features", target_features)
    return calls, fail_at


def test_sparrow_features_reruns_exactly_after_a_kill(tmp_path, tiny_dataset, whole, passes, monkeypatch,
                                                     capsys):
    """Ctrl-C in the 3rd pass, then what a SIGKILL or a power loss can leave: truncated temporary files
    (also the old writer's ``.<key>.<8 hex>.tmp``), torn entries under their final names. The rerun removes
    the first (and nothing that only looks like them), computes the second again and finishes the cache."""
    from vidspec.decoding.errors import ConfigError
    from vidspec.draft_training.sparrow.features import FeatureCache

    calls, fail_at = passes
    out = tmp_path / "feats"
    fail_at[0] = 3
    assert _features(tiny_dataset, out) == 130
    assert "interrupted" in capsys.readouterr().err
    b0, b1, b2 = list(calls)  # the keys of batches 0-2; batches 0 and 1 are on disk
    ref = _entries(whole)
    b3 = sorted(set(ref) - {f"{k}.safetensors" for k in b0 + b1 + b2})  # file names of batch 3
    assert _entries(out) == {f"{k}.safetensors": ref[f"{k}.safetensors"] for k in b0 + b1}
    assert not (out / "features.json").exists() and (out / "features.partial.json").is_file()
    assert _hidden(out) == []
    with pytest.raises(ConfigError, match="unfinished"):
        FeatureCache(out, target=None)

    def half(key: str) -> bytes:
        data = ref[f"{key}.safetensors"]
        return data[: len(data) // 2]

    (out / f"{b1[1]}.safetensors").write_bytes(half(b1[1]))  # a writer without fsync, then a power loss
    (out / f".{b2[0]}.safetensors.0123abcd").write_bytes(half(b2[0]))
    (out / f"{b2[1]}.safetensors").write_bytes(b"")
    key3 = b3[0].removesuffix(".safetensors")
    (out / f".{key3}.89abcdef.tmp").write_bytes(half(key3))  # the writer before atomic_path
    (out / ".features.json.0123abcd").write_text('{"target_id": ')
    (out / ".features.partial.json.89abcdef").write_text("")
    keep = [out / f".{b2[0]}.safetensors.0123abcd.bak", out / f".{b2[0]}.safetensors.notes",
            out / ".features.json.swp", out / "notes.txt"]
    for p in keep:
        p.write_text("not the writer's\n")
    kept = _stats(out)[f"{b1[0]}.safetensors"]

    synced = {"file": 0, "folder": 0}
    real_fsync = os.fsync

    def fsync(fd):
        synced["folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"] += 1
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    calls.clear()
    fail_at[0] = 0
    assert _features(tiny_dataset, out) == 0
    # 5 entries, features.partial.json and features.json: each synced, then its folder after the rename
    assert synced == {"file": 7, "folder": 7}
    # batch 0 skipped, batch 1 computed again for its torn entry
    assert len(calls) == 3 and calls[:2] == [b1, b2] and sorted(f"{k}.safetensors" for k in calls[2]) == b3
    assert _stats(out)[f"{b1[0]}.safetensors"] == kept  # the whole entry beside the torn one is not rewritten
    _assert_same_as_whole(out, whole)
    assert _hidden(out) == sorted(p.name for p in keep if p.name.startswith("."))
    assert all(p.read_text() == "not the writer's\n" for p in keep)

    # A rerun of a finished cache computes and rewrites nothing.
    before = _stats(out)
    calls.clear()
    assert _features(tiny_dataset, out) == 0
    assert calls == [] and _stats(out) == before
    _assert_same_as_whole(out, whole)


@pytest.mark.parametrize("error", [KeyboardInterrupt(), OSError(errno.ENOSPC, "No space left on device")],
                         ids=["ctrl-c", "disk-full"])
def test_sparrow_features_leaves_no_torn_file_when_a_write_fails(tmp_path, tiny_dataset, whole, passes,
                                                                  monkeypatch, capsys, error):
    """The 3rd entry's write stops after half its bytes: no entry, no temporary file, no finished marker."""
    import safetensors.torch

    calls, _ = passes
    real = safetensors.torch.save_file
    saves: list[str] = []
    torn: list[tuple[str, int]] = []
    tear = [True]

    def save_file(tensors, filename, metadata=None):
        saves.append(filename)
        if tear[0] and len(saves) == BATCH + 1:
            data = safetensors.torch.save(tensors, metadata)
            Path(filename).write_bytes(data[: len(data) // 2])
            torn.append((Path(filename).name, Path(filename).stat().st_size))
            raise error
        return real(tensors, filename, metadata)

    monkeypatch.setattr(safetensors.torch, "save_file", save_file)
    out = tmp_path / "feats"
    if isinstance(error, KeyboardInterrupt):
        assert _features(tiny_dataset, out) == 130
        assert "interrupted" in capsys.readouterr().err
    else:
        assert _features(tiny_dataset, out) == 2  # a fault the user can fix: one line, no traceback
        assert "No space" in capsys.readouterr().err
    assert len(torn) == 1 and torn[0][0].startswith(".") and torn[0][1] > 0  # it went to a temporary file
    assert list(_entries(out)) == sorted(f"{k}.safetensors" for k in calls[0]) and _hidden(out) == []
    assert not (out / "features.json").exists() and (out / "features.partial.json").is_file()

    tear[0] = False
    calls.clear()
    assert _features(tiny_dataset, out) == 0
    assert len(calls) == ROWS // BATCH - 1
    _assert_same_as_whole(out, whole)
    assert _hidden(out) == []
