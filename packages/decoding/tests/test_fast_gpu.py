"""The fast path on CUDA (opt-in: ``pytest -m gpu packages/decoding/tests/test_fast_gpu.py``).

bf16 tolerances: logits of the fast path and of the eager HF path differ by rounding of bf16
matmuls in different shapes/orders; we require max |Δlogit| <= 5e-2 * max |logit| (about 1e-2 is
typical for bf16 on these tiny models). Greedy token identity is asserted where both sides use the
same numerics (graphs vs eager FastLM steps of equal shapes, SD vs AR through the fast path on
tiny models, whose logits are decisive).
"""

from __future__ import annotations

import pytest
import torch

from vidspec.decoding.loops.chain import SpeculativeDecoder
from vidspec.decoding.types import Request

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

FAMILIES = ["tiny-qwen2.5-vl", "tiny-llava-ov"]
REL = 5e-2


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-6))


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("compile", [False, True])
def test_graph_steps_match_eager_hf_bf16(cuda_tiny, clip, name, compile):
    from vidspec.decoding.fast import FastTarget

    target = cuda_tiny(name)
    fast = FastTarget(target, max_len=1024, graphs=True, compile=compile)
    assert fast.graphs
    req = Request("Describe the video.", clip)
    ref, ours = target.prefill(req), fast.prefill(req)
    assert rel_err(ours.first_logits, ref.first_logits) < REL
    toks = [int(ref.first_logits.argmax()), 7, 8, 9, 10]
    for _ in range(2):  # first call captures, second replays
        a = target.verify(ref, toks)
        b = fast.verify(ours, toks)
        assert rel_err(b.logits, a.logits) < REL
        target.rollback(ref, ref.length - len(toks))
        fast.rollback(ours, ours.length - len(toks))
    assert len(fast.lm._graphs) >= 1


@pytest.mark.parametrize("name", FAMILIES)
def test_graphs_equal_eager_fastlm(cuda_tiny, clip, name):
    """Replaying a captured step gives the same numbers as running the same step eagerly."""
    from vidspec.decoding.fast import FastTarget

    target = cuda_tiny(name)
    req = Request("Describe the video.", clip)
    g = FastTarget(target, max_len=1024, graphs=True, compile=False)
    e = FastTarget(target, max_len=1024, graphs=False, compile=False)
    sg, se = g.prefill(req), e.prefill(req)
    for toks in ([5, 6, 7], [8], [9, 10, 11, 12]):
        a, b = g.verify(sg, toks), e.verify(se, toks)
        assert rel_err(a.logits, b.logits) < 1e-2


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("compile", [False, True])
def test_fast_sd_equals_fast_ar_on_cuda(cuda_tiny, clip, name, compile):
    from vidspec.decoding.fast import FastModelDrafter, FastStrictVerifier, FastTarget
    from vidspec.decoding.models import load_target

    target = cuda_tiny(name)
    req = Request("What happens in this video?", clip)
    ar = SpeculativeDecoder(FastTarget(target, compile=compile)).generate(req, max_new_tokens=48)
    twin = load_target(name, device="cuda", dtype="bfloat16")
    dec = SpeculativeDecoder(FastTarget(target, compile=compile), FastModelDrafter(FastTarget(twin, compile=compile)),
                             FastStrictVerifier(), k=5)
    sd = dec.generate(req, max_new_tokens=48)
    assert sd.token_ids == ar.token_ids
    assert sd.tau > 3


def test_tree_decoding_on_cuda(cuda_tiny, clip):
    from vidspec.decoding.fast import FastTarget, TreeModelDrafter
    from vidspec.decoding.loops.tree import TreeSpeculativeDecoder
    from vidspec.decoding.models import load_target

    name = "tiny-qwen2.5-vl"
    target = cuda_tiny(name)
    req = Request("Describe the video.", clip)
    ar = SpeculativeDecoder(FastTarget(target, compile=False)).generate(req, max_new_tokens=32)
    twin = load_target(name, device="cuda", dtype="bfloat16")
    dec = TreeSpeculativeDecoder(FastTarget(target, compile=False), TreeModelDrafter(FastTarget(twin, compile=False)),
                                 total_tokens=12, depth=3, top_k=4)
    assert dec.generate(req, max_new_tokens=32).token_ids == ar.token_ids


def test_fast_vision_bf16(cuda_tiny):
    import numpy as np

    from vidspec.decoding.fast import FastQwenVision
    from vidspec.decoding.types import VideoClip

    target = cuda_tiny("tiny-qwen2.5-vl")
    frames = np.random.default_rng(0).integers(0, 255, (8, 56, 84, 3), dtype=np.uint8)
    vis = target.visual_inputs(VideoClip(frames=frames, fps=2.0, source="memory"))
    px, grid = vis.tensors["pixel_values_videos"], vis.tensors["video_grid_thw"]
    with torch.no_grad():
        ref = target.model.model.visual(px, grid_thw=grid).pooler_output
    assert rel_err(FastQwenVision(target.model.model.visual)(px, grid), ref) < REL


def _verify_twice_and_generate(fast, req):
    """A 5-token verify step twice (capture, then replay; rolled back each time), a 1-token step, then a
    12-token greedy generation: ``(the two verify logits, the 1-token logits, the generated ids)``."""
    st = fast.prefill(req)
    toks = [int(st.first_logits.argmax()), 7, 8, 9, 10]
    rows = []
    for _ in range(2):
        rows.append(fast.verify(st, toks).logits.clone())
        fast.rollback(st, st.length - len(toks))
    one = fast.verify(st, toks[:1]).logits.clone()
    return rows, one, SpeculativeDecoder(fast).generate(req, max_new_tokens=12).token_ids


@pytest.mark.parametrize("name", FAMILIES)
def test_gemv_steps_match_cublas_steps(cuda_tiny, clip, name):
    """FastTarget(gemv=True) (Triton small-M products inside the compiled pieces and graphs) gives the
    logits of the cuBLAS path within bf16 rounding, and the same greedy decode on these tiny models."""
    from vidspec.decoding.fast import FastTarget

    target = cuda_tiny(name)
    req = Request("Describe the video.", clip)
    outs = [_verify_twice_and_generate(FastTarget(target, max_len=1024, graphs=True, compile=True, gemv=gemv), req)
            for gemv in (False, True)]
    (a_rows, a_one, a_ids), (b_rows, b_one, b_ids) = outs
    for a, b in zip(a_rows, b_rows):
        assert rel_err(b, a) < REL
    assert rel_err(b_one, a_one) < REL
    assert b_ids == a_ids


# Split-K at 7B shapes vs cuBLAS in bf16: both accumulate in fp32 and round once to bf16, in different
# orders, so we require max |Δ| <= 1e-2 * max |ref| (bf16's half-ulp is 2**-9 ~ 2e-3 of the value).
SPLIT_TOL = 1e-2


@pytest.mark.parametrize(("m", "n", "k", "cfg"), [
    (9, 3584, 3584, dict(BN=64, BK=128, split=7, num_warps=4, num_stages=4)),     # o, a K=8 verify step
    (16, 3584, 18944, dict(BN=64, BK=128, split=10, num_warps=4, num_stages=4)),  # down, 16 rows
    (3, 4608, 3584, dict(BN=32, BK=128, split=4, num_warps=4, num_stages=3)),     # q/k/v, 3 rows
    (1, 3584, 3584, dict(BN=16, BK=256, split=2, num_warps=4, num_stages=4)),     # o, one row (no dot)
    (1, 3584, 18944, dict(BN=8, BK=512, split=4, num_warps=4, num_stages=2)),     # down, one row
])
@pytest.mark.parametrize("bias", [False, True])
def test_split_k_bf16_matches_cublas_in_graphs(m, n, k, cfg, bias):
    """The split-K product equals cuBLAS within SPLIT_TOL, is bitwise repeatable, and a CUDA graph of
    three calls (counters reset by each call) replays to the eager result, twice."""
    from vidspec.decoding.fast import gemv  # noqa: F401  (registers vidspec::split_linear)

    g = torch.Generator(device="cuda").manual_seed(n + k + m)
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    w = (torch.randn(n, k, device="cuda", generator=g) * 0.02).bfloat16()
    b = torch.randn(n, device="cuda", generator=g).bfloat16() if bias else None
    args = (cfg["BN"], cfg["BK"], cfg["split"], cfg["num_warps"], cfg["num_stages"])
    ref = torch.nn.functional.linear(x, w, b)
    eager = torch.ops.vidspec.split_linear(x, w, b, *args)
    assert rel_err(eager, ref) <= SPLIT_TOL
    assert torch.equal(torch.ops.vidspec.split_linear(x, w, b, *args), eager)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        outs = [torch.ops.vidspec.split_linear(x, w, b, *args) for _ in range(3)]
    for _ in range(2):
        graph.replay()
        torch.cuda.synchronize()
        for o in outs:
            assert torch.equal(o, eager)


def test_split_k_first_call_inside_capture_is_refused():
    from vidspec.decoding.fast import gemv

    x = torch.randn(9, 96, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(24, 96, device="cuda", dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="inside CUDA-graph capture"):
        with torch.cuda.graph(graph, stream=s):
            gemv.split_linear(x, w, None, 16, 16, 3, 4, 2)  # a key no earlier call used


def test_small_linear_split_compiled_and_captured(monkeypatch):
    """torch.compile(fullgraph) of a function calling vidspec::small_linear on split-K shapes (the default
    verify configs, and a table forcing one-row split), then a CUDA graph of the compiled call."""
    import json
    import tempfile

    from vidspec.decoding.fast import gemv

    table = {"m1": {"3584x3584": {"BN": 16, "BK": 256, "split": 2, "num_warps": 4, "num_stages": 4}}}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(table, f)
    monkeypatch.setenv(gemv.TABLE_ENV, f.name)
    w1 = (torch.randn(3584, 3584, device="cuda") * 0.02).bfloat16()
    w2 = (torch.randn(3584, 18944, device="cuda") * 0.02).bfloat16()
    assert gemv.gemv_config(9, 3584, 18944)["split"] > 1 and gemv.gemv_config(1, 3584, 3584)["split"] == 2

    def two(x):
        h = torch.ops.vidspec.small_linear(x, w1, None)
        return torch.ops.vidspec.small_linear(torch.cat([h] * 6, 1)[:, :18944].contiguous(), w2, None)

    cf = torch.compile(two, fullgraph=True, dynamic=False)
    for m in (1, 9):
        x = torch.randn(m, 3584, device="cuda", dtype=torch.bfloat16)
        ref = torch.nn.functional.linear(torch.cat([torch.nn.functional.linear(x, w1)] * 6, 1)[:, :18944], w2)
        out = cf(x)  # eager-time first call: allocates the buffers
        assert rel_err(out, ref) <= 3 * SPLIT_TOL
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=s):
            gout = cf(x)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(gout, out)


def test_gemv_all_steps_match_cublas_steps(cuda_tiny, clip, tmp_path, monkeypatch):
    """FastTarget(gemv="all") with a table forcing split-K (BK 16, split 2) on every product of the tiny
    model: verify and AR logits match the cuBLAS path within bf16 rounding, graphs replay, greedy decode equal."""
    import json

    from vidspec.decoding.fast import FastTarget, gemv

    name = "tiny-qwen2.5-vl"
    target = cuda_tiny(name)
    ref = FastTarget(target, max_len=1024, graphs=True, compile=True)
    shapes = {f"{w.shape[0]}x{w.shape[1]}" for lw in ref.lm.layers for w in (lw.wqkv, lw.wo, lw.wgu, lw.wd)}
    shapes.add(f"{ref.lm.head.shape[0]}x{ref.lm.head.shape[1]}")
    cfg = {"BN": 16, "BK": 16, "split": 2, "num_warps": 4, "num_stages": 2}
    path = tmp_path / "table.json"
    path.write_text(json.dumps({"m1": {s: cfg for s in shapes}, "m2-16": {s: cfg for s in shapes}}))
    monkeypatch.setenv(gemv.TABLE_ENV, str(path))
    req = Request("Describe the video.", clip)
    outs = [_verify_twice_and_generate(fast, req)
            for fast in (ref, FastTarget(target, max_len=1024, graphs=True, compile=True, gemv="all"))]
    (a_rows, a_one, a_ids), (b_rows, b_one, b_ids) = outs
    for a, b in zip(a_rows, b_rows):
        assert rel_err(b, a) < REL
    assert torch.equal(b_rows[0], b_rows[1])
    assert rel_err(b_one, a_one) < REL
    assert b_ids == a_ids
