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


def test_warmup_reports_where_its_time_went():
    dec = build_decoder("ar", target="tiny-qwen2.5-vl")
    info = dec.warmup(request=synthetic_request(dec.target, size=(56, 56)))
    detail = info["detail"]
    assert detail["decode_s"] > 0 and detail["graphs_s"] >= 0 and isinstance(detail["compile"], dict)
    assert detail["decode_s"] + detail["graphs_s"] <= info["warmup_s"] + 2e-3  # (rounded to ms)
    assert "artifacts_s" not in detail  # the portable artifacts are opt-in


def test_stats_delta_keeps_what_moved():
    from vidspec.decoding.loops.warm import stats_delta

    before = {"s:compile_inner": 1.0, "s:bytecode_tracing": 0.5, "n:fxgraph_cache_hit": 2.0, "n:unique_graphs": 3.0}
    after = {"s:compile_inner": 3.5, "s:bytecode_tracing": 0.5, "n:fxgraph_cache_hit": 6.0, "n:unique_graphs": 3.0,
             "n:dynamo_cache_hit": 4.0}
    assert stats_delta(before, after) == {"compile_inner_s": 2.5, "fxgraph_cache_hit": 4, "dynamo_cache_hit": 4}


def test_compile_artifacts_saved_and_loaded_once(monkeypatch, tmp_path):
    import torch

    path = tmp_path / "a" / "artifacts.bin"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cc"))
    monkeypatch.setattr(compile_cache, "_loaded", {})
    monkeypatch.setattr(compile_cache, "_precompile_on", lambda: None)  # the flag itself is torch's (process-wide)
    # off by default: nothing saved, nothing loaded
    monkeypatch.delenv(compile_cache.ARTIFACTS_ENV, raising=False)
    assert compile_cache.save_compile_artifacts() is None and compile_cache.artifacts_path() is None
    monkeypatch.setenv(compile_cache.ARTIFACTS_ENV, str(path))
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (b"compiled", None))
    loads = []
    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", lambda data: loads.append(data) or "info")
    compile_cache.use_compile_cache()  # no file yet: nothing loaded
    assert loads == []
    assert compile_cache.save_compile_artifacts() == path and path.read_bytes() == b"compiled"
    assert list(path.parent.iterdir()) == [path]  # written through a temporary file, replaced atomically
    monkeypatch.setattr(compile_cache, "_loaded", {})  # a new process
    compile_cache.use_compile_cache()
    compile_cache.use_compile_cache()
    assert loads == [b"compiled"]  # once per process


def test_compile_artifacts_failures_leave_the_caches_alone(monkeypatch, tmp_path, caplog):
    import torch

    path = tmp_path / "artifacts.bin"
    path.write_bytes(b"not torch's")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cc"))
    monkeypatch.setenv(compile_cache.ARTIFACTS_ENV, str(path))
    monkeypatch.setattr(compile_cache, "_loaded", {})
    monkeypatch.setattr(compile_cache, "_precompile_on", lambda: None)

    def refuse(*_):
        raise RuntimeError("bad artifacts")

    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", refuse)
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", refuse)
    assert compile_cache.use_compile_cache() == tmp_path / "cc"  # a warning, not an error
    assert compile_cache.save_compile_artifacts() is None
    assert sum("bad artifacts" in r.getMessage() for r in caplog.records) == 2


def test_compile_cache_replaces_torchs_default_folder(monkeypatch, tmp_path):
    """Importing Dynamo writes torch's default folder into TORCHINDUCTOR_CACHE_DIR; that is not a user's choice,
    so the fast engine's folder still applies (on the GPU every process otherwise shared the temporary folder)."""
    import torch._dynamo  # noqa: F401 - what the fast engine's processes have imported before compiling
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())
    monkeypatch.setenv(compile_cache.ENV, str(tmp_path / "ours"))
    assert compile_cache.use_compile_cache() == tmp_path / "ours"
    import os

    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "ours")
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    assert cache_dir() == str(tmp_path / "ours")  # what Inductor will use
