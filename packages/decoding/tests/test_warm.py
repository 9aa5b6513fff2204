"""Warm decoders: one-time work before the first request; torch's compile cache folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from vidspec.decoding.fast import compile_cache
from vidspec.decoding.loops.warm import synthetic_request
from vidspec.decoding.methods import build_decoder


@pytest.mark.parametrize("engine", ["eager", "fast"])
def test_warmup_then_requests_are_unchanged(engine):
    dec = build_decoder("sd", target="tiny-qwen2.5-vl", engine=engine, k=3)
    req = synthetic_request(dec.target, size=(56, 56))
    cold = dec.generate(req, max_new_tokens=12)
    info = dec.warmup()
    assert info["warmup_s"] > 0 and info["graphs"] == 0  # no CUDA graphs on CPU
    assert dec.adaptive is not None  # restored after the warm-up decode
    assert dec.generate(req, max_new_tokens=12).token_ids == cold.token_ids


def test_tree_decoder_warms_up():
    dec = build_decoder("tree-sd", target="tiny-qwen2.5-vl", tree={"total_tokens": 6, "depth": 2, "top_k": 2})
    assert dec.warmup()["warmup_s"] > 0


def test_compile_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "")  # recorded, so the test's own setting is undone after it
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    monkeypatch.setenv(compile_cache.ENV, str(tmp_path / "cc"))
    assert compile_cache.use_compile_cache() == tmp_path / "cc"
    assert Path(tmp_path / "cc").is_dir()
    monkeypatch.delenv(compile_cache.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compile_cache.compile_cache_dir() == tmp_path / "xdg" / "vidspec" / "torch-compile"


def test_compile_cache_keeps_the_users_choice(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv(compile_cache.ENV, str(tmp_path / "ours"))
    assert compile_cache.use_compile_cache() == tmp_path / "mine"
