"""FastTarget (static cache, one forward for every step kind) against the eager adapters, on CPU fp32.

The eager HF path is the reference: logits and hidden states must match to float rounding, and
greedy speculative output through the fast path must be token-identical to eager AR decoding.
"""

from __future__ import annotations

import pytest
import torch

from vidspec.decoding.drafters import ModelDrafter
from vidspec.decoding.fast import FastModelDrafter, FastStrictVerifier, FastTarget
from vidspec.decoding.loops.chain import SpeculativeDecoder
from vidspec.decoding.testing import assert_same_rounds, device_round_runs
from vidspec.decoding.types import Request

FAMILIES = ["tiny-qwen2.5-vl", "tiny-llava-ov"]
N = 24
NEED = frozenset({"penult", "mid", "last"})
TOL = 1e-4


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.float() - b.float()).abs().max().item() < TOL


@pytest.mark.parametrize("name", FAMILIES)
def test_prefill_and_verify_match_eager(tiny, clip, name):
    target = tiny(name)
    fast = FastTarget(target, max_len=512)
    req = Request("Describe the video.", clip)
    need = NEED | {"visual"}
    ref, ours = target.prefill(req, need), fast.prefill(req, need)
    assert ours.length == ref.length and ours.extra["offset"] == ref.extra["offset"]
    assert close(ours.first_logits, ref.first_logits)
    assert close(ours.prompt_hidden_penult, ref.prompt_hidden_penult)
    assert close(ours.visual_hidden, ref.visual_hidden)
    toks = [int(ref.first_logits.argmax()), 7, 8, 9]
    a, b = target.verify(ref, toks, NEED), fast.verify(ours, toks, NEED)
    for x, y in [(a.logits, b.logits), (a.hidden_last, b.hidden_last), (a.hidden_penult, b.hidden_penult),
                 (a.hidden_mid, b.hidden_mid)]:
        assert x.shape == y.shape and close(x, y)
    # the device-side greedy decision equals the host rule
    choice = a.logits.argmax(-1).tolist()
    n = 0
    while n < 3 and toks[n + 1] == choice[n]:
        n += 1
    assert b.greedy() == (n, choice[n])


@pytest.mark.parametrize("name", FAMILIES)
def test_rollback_is_a_length_change(tiny, clip, name):
    target = tiny(name)
    fast = FastTarget(target, max_len=512)
    req = Request("What happens in this video?", clip)
    s = fast.prefill(req)
    base = s.length
    fast.verify(s, [5, 6, 7, 8])
    fast.rollback(s, base + 2)
    assert s.length == s.cache.get_seq_length() == base + 2
    after = fast.verify(s, [9, 10])
    ref = target.prefill(req)
    want = target.verify(ref, [5, 6, 9, 10])
    assert close(after.logits, want.logits[2:])
    with pytest.raises(ValueError):
        fast.rollback(s, s.length + 1)


@pytest.mark.parametrize("name", FAMILIES)
def test_chunked_prefill_equals_one_shot(tiny, clip, name):
    target = tiny(name)
    req = Request("Describe the video.", clip)
    need = NEED | {"visual"}
    one = FastTarget(target, max_len=512, prefill_chunk=100_000)
    chunked = FastTarget(target, max_len=512, prefill_chunk=7)  # chunks cut through the video tokens
    a, b = one.prefill(req, need), chunked.prefill(req, need)
    assert a.length > 3 * 7
    assert close(a.first_logits, b.first_logits)
    assert close(a.prompt_hidden_penult, b.prompt_hidden_penult)
    assert close(a.visual_hidden, b.visual_hidden)
    assert close(one.verify(a, [5, 6]).logits, chunked.verify(b, [5, 6]).logits)


@pytest.mark.parametrize(("name", "k"), [("tiny-qwen2.5-vl", 2), ("tiny-llava-ov", 5)])
def test_fast_sd_is_token_identical_to_eager_ar(tiny, clip, perturbed, name, k):
    target = tiny(name)
    req = Request("What happens in this video?", clip)
    ar = SpeculativeDecoder(target).generate(req, max_new_tokens=N)
    fast_ar = SpeculativeDecoder(FastTarget(target, max_len=512)).generate(req, max_new_tokens=N)
    assert fast_ar.token_ids == ar.token_ids
    dec = SpeculativeDecoder(FastTarget(target, max_len=512), FastModelDrafter(perturbed(name)), FastStrictVerifier(),
                             k=k)
    sd = dec.generate(req, max_new_tokens=N)
    assert sd.token_ids == ar.token_ids
    # the perturbed draft is right sometimes and wrong sometimes: partial acceptance and rollback ran
    assert 0 < sum(s.accepted for s in sd.steps) < sum(s.drafted for s in sd.steps)


@pytest.mark.parametrize("name", ["tiny-qwen2.5-vl", "tiny-llava-ov"])
def test_fast_sd_device_rounds_equal_host_rounds(tiny, clip, perturbed, name):
    """A draft VLM on a FastTarget drafts on the device (greedy_chain_device) and the target verifies there:
    the same rounds as the host-driven ones, token-identical to AR, and the device path is taken."""
    target = tiny(name)
    req = Request("What happens in this video?", clip)
    ar = SpeculativeDecoder(target).generate(req, max_new_tokens=N)
    runs, used = device_round_runs(
        lambda on: SpeculativeDecoder(FastTarget(target, max_len=512), FastModelDrafter(perturbed(name)),
                                      FastStrictVerifier(), k=3, device_rounds=on), req, N, "verify_device")
    on, off = runs
    assert_same_rounds(on, off, ar)
    assert used[0] == sum(1 for s in on.steps if s.drafted > 0) > 0 and used[1] == 0


def test_build_decoder_with_fast_models(tiny, clip):
    """methods.build_decoder takes loaded models: FastTargets slot in, drafted by the plain ModelDrafter."""
    from vidspec.decoding.methods import build_decoder

    name = "tiny-qwen2.5-vl"
    req = Request("Describe the video.", clip)
    ar = SpeculativeDecoder(tiny(name)).generate(req, max_new_tokens=N)
    dec = build_decoder("sd", target=FastTarget(tiny(name)), draft=FastTarget(tiny(name + "-draft")), k=3)
    assert isinstance(dec.drafter, ModelDrafter)
    assert dec.generate(req, max_new_tokens=N).token_ids == ar.token_ids


def test_text_only_and_identical_draft(tiny):
    name = "tiny-llava-ov"
    from vidspec.decoding.models import load_target

    target = tiny(name)
    req = Request("Say something.")
    ar = SpeculativeDecoder(target).generate(req, max_new_tokens=N)
    sd = SpeculativeDecoder(FastTarget(target), FastModelDrafter(load_target(name)), FastStrictVerifier(),
                            k=4).generate(req, max_new_tokens=N)
    assert sd.token_ids == ar.token_ids
    assert all(s.accepted == 4 for s in sd.steps[:-1])


def test_one_live_request_per_fast_target(tiny, clip):
    fast = FastTarget(tiny("tiny-llava-ov"), max_len=256)
    old = fast.prefill(Request("Describe the video.", clip))
    fast.prefill(Request("Say something."))
    with pytest.raises(RuntimeError):
        fast.verify(old, [5])


def test_cache_capacity_is_checked(tiny, clip):
    fast = FastTarget(tiny("tiny-llava-ov"), max_len=32)
    with pytest.raises(ValueError, match="max_len"):
        fast.prefill(Request("Describe the video.", clip))


@pytest.mark.parametrize("name", FAMILIES)
def test_sparrow_drafter_runs_on_a_fast_target(tiny, clip, name):
    # SparrowDrafter asks its target for the prompt's position ids (M-RoPE for Qwen2.5-VL).
    from vidspec.decoding.drafters.sparrow import SparrowDrafter, new_sparrow_for

    t = tiny(name)
    req = Request("Describe the video.", clip)
    eager = SpeculativeDecoder(t, SparrowDrafter(new_sparrow_for(t)), k=3).generate(req, max_new_tokens=N)
    fast = FastTarget(t, max_len=1024, graphs=False)
    res = SpeculativeDecoder(fast, SparrowDrafter(new_sparrow_for(t)), FastStrictVerifier(), k=3).generate(
        req, max_new_tokens=N)
    assert res.token_ids == eager.token_ids
    assert [s.accepted for s in res.steps] == [s.accepted for s in eager.steps]


def test_triton_kernels_only_for_power_of_two_head_dims():
    # The H200 run of a draft VLM with head dim 24 (hidden 96, 4 heads) crashed in Triton
    # ("arange's range must be a power of 2"); such models now take the SDPA step path.
    from vidspec.decoding.fast.lm import kernels_fit

    assert [kernels_fit(d) for d in (8, 16, 24, 32, 48, 64, 128)] == [False, True, False, True, False, True, True]


def test_gc_paused_keeps_the_collector_off_and_restores_it():
    """CUDA graph captures run with the cyclic GC off (a collection could free graphs mid-capture)."""
    import gc

    from vidspec.decoding.fast.lm import gc_paused

    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("capture failed")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # a collector that was off stays off
    finally:
        gc.enable()
