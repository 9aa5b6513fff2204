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

from vidspec.decoding.engine import SpeculativeDecoder
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
    from vidspec.decoding.fast import FastTarget, TreeModelDrafter, TreeSpeculativeDecoder
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


@pytest.mark.parametrize("name", FAMILIES)
def test_gemv_steps_match_cublas_steps(cuda_tiny, clip, name):
    """FastTarget(gemv=True) (Triton small-M products inside the compiled pieces and graphs) gives the
    logits of the cuBLAS path within bf16 rounding, and the same greedy decode on these tiny models."""
    from vidspec.decoding.fast import FastTarget

    target = cuda_tiny(name)
    req = Request("Describe the video.", clip)
    outs = []
    for gemv in (False, True):
        fast = FastTarget(target, max_len=1024, graphs=True, compile=True, gemv=gemv)
        st = fast.prefill(req)
        toks = [int(st.first_logits.argmax()), 7, 8, 9, 10]
        rows = []
        for _ in range(2):  # capture, then replay
            rows.append(fast.verify(st, toks).logits.clone())
            fast.rollback(st, st.length - len(toks))
        one = fast.verify(st, toks[:1]).logits.clone()
        outs.append((rows, one, SpeculativeDecoder(fast).generate(req, max_new_tokens=12).token_ids))
    (a_rows, a_one, a_ids), (b_rows, b_one, b_ids) = outs
    for a, b in zip(a_rows, b_rows):
        assert rel_err(b, a) < REL
    assert rel_err(b_one, a_one) < REL
    assert b_ids == a_ids
