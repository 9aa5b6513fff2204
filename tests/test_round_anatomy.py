"""benchmarks/round_anatomy_gpu.py: its host timers on CPU (the graph costs need CUDA) and its refusal of CPU."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
RELEASES = REPO / "data" / "releases"


@pytest.fixture(scope="module")
def anatomy():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        yield importlib.import_module("round_anatomy_gpu")
    finally:
        sys.path.remove(str(REPO / "benchmarks"))


def test_cpu_is_refused_in_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "round_anatomy_gpu.py"), "--target", str(RELEASES / "synthvid-target"),
         "--sparrow", str(RELEASES / "sparrow-synthvid"), "--data", str(tmp_path), "--device", "cpu",
         "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2 and "needs --device cuda" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("method,tree", [("sparrow", None), ("tree-sparrow", {"total_tokens": 12, "depth": 3, "top_k": 4})])
def test_timers_count_a_rounds_calls_and_change_nothing(anatomy, tmp_path, method, tree):
    from vidspec.decoding.fast import target as fast_target
    from vidspec.decoding.fast import tree as fast_tree
    from vidspec.decoding.methods import as_fast, build_decoder, tree_fast_options
    from vidspec.decoding.models import load_target
    from vidspec.evaluation.benchmarks.registry import load_benchmark
    from vidspec.evaluation.runner import decode_sample
    from vidspec.evaluation.synthvid import SynthVidConfig, generate_synthvid

    torch.set_num_threads(1)
    data = generate_synthvid(tmp_path / "sv", SynthVidConfig(num_videos=2, seed=3, preset="easy", frames=8, size="64x64",
                                                             split="validation", styles="alpha"), progress=False)
    (sample, *_) = load_benchmark("synthvid_captions", str(data), split="validation", limit=1)
    tgt = as_fast(load_target(str(RELEASES / "synthvid-target"), device="cpu"),
                  tree_fast_options({}, tree["total_tokens"]) if tree else None)
    dec = build_decoder(method, target=tgt, draft=str(RELEASES / "sparrow-synthvid"), engine="fast", device="cpu",
                        tree=tree)
    plain, _, _ = decode_sample(dec, sample, 24)
    originals = (fast_target.FastVerifyOutput.draft_tokens, fast_tree.best_path)
    timers = anatomy.HostTimers()
    anatomy.instrument(dec, timers)
    try:
        timed, _, _ = decode_sample(dec, sample, 24)
    finally:
        timers.restore()
    assert timed.token_ids == plain.token_ids  # the timers only observe
    table = timers.table(len(timed.steps), 1)
    rounds = len(timed.steps)
    assert table["drafter.begin"]["calls"] == 1 and table["drafter.commit"]["calls"] == rounds
    if tree:
        assert table["drafter.propose_tree_device"]["calls"] == rounds
        assert table["tree.best_path"]["calls"] == rounds and table["target.commit_tree"]["calls"] == rounds
    else:
        assert table["drafter.propose_device"]["calls"] == table["target.verify_device"]["calls"] == rounds
        assert table["read-back: draft_tokens (incl. the wait)"]["calls"] == rounds
        keys = table["drafter._run (chain launch)"]["keys"]
        assert sum(keys.values()) == table["drafter._run (chain launch)"]["calls"] and all("k=" in k for k in keys)
    assert all(v["us_per_call"] >= 0 for v in table.values())
    # every wrapper is gone: instance attributes removed, class and module functions put back
    assert not {"begin", "commit", "propose_device", "propose_tree_device"} & set(vars(dec.drafter))
    assert not {"verify_device", "verify_tree_device", "prefill", "rollback"} & set(vars(dec.target))
    assert (fast_target.FastVerifyOutput.draft_tokens, fast_tree.best_path) == originals


def test_prepare_profile_names_the_feed(anatomy, tmp_path):
    """--profile-prepare: cProfile of the drafter's prepare alone (here on CPU: the eager prompt feed)."""
    from vidspec.decoding.methods import build_decoder
    from vidspec.decoding.models import load_target
    from vidspec.evaluation.benchmarks.registry import load_benchmark
    from vidspec.evaluation.synthvid import SynthVidConfig, generate_synthvid

    torch.set_num_threads(1)
    data = generate_synthvid(tmp_path / "sv", SynthVidConfig(num_videos=2, seed=3, preset="easy", frames=8, size="64x64",
                                                             split="validation", styles="alpha"), progress=False)
    samples = load_benchmark("synthvid_captions", str(data), split="validation", limit=2)
    dec = build_decoder("sparrow", target=load_target(str(RELEASES / "synthvid-target"), device="cpu"),
                        draft=str(RELEASES / "sparrow-synthvid"), engine="fast", device="cpu")
    got = anatomy.profile_prepare(dec, samples, 3)
    assert got["calls"] == 3 and got["ms_per_call_profiled"] > 0
    assert "_prefill" in got["top_by_tottime"] or "_start_prompt" in got["top_by_tottime"]
    assert dec.drafter.cache_length > 0 and not dec.drafter._pending.tokens  # prepared, not begun
