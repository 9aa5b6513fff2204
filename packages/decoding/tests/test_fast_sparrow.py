"""FastSparrowDrafter (static text-only cache, CUDA-graph draft steps) against SparrowDrafter.

CPU tests run the fast drafter's step function eagerly (and once through an emulation of the
graph path: capture-time warm-ups and restores, static output buffers, bucketed attention). The
GPU tests (``pytest -m gpu packages/decoding/tests/test_fast_sparrow.py``) replay real CUDA graphs.
"""

from __future__ import annotations

import copy
import gzip
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vidspec.decoding.drafters.sparrow import SparrowDrafter, new_sparrow_for
from vidspec.decoding.fast.sparrow_drafter import PREFILL_T, FastSparrowDrafter
from vidspec.decoding.loops.chain import SpeculativeDecoder
from vidspec.decoding.testing import (
    aligned_sparrow,
    assert_same_rounds,
    emulated_graph_drafter_class,
    text_positions,
)
from vidspec.decoding.testing import random_clip as make_clip
from vidspec.decoding.types import Request
from vidspec.decoding.verifiers.strict import StrictVerifier

FAMILIES = ["tiny-qwen2.5-vl", "tiny-llava-ov"]
NEED = frozenset({"penult"})
#: n_accepted per round, clipped to K: full rejection, partial and full acceptance.
ACCEPT = [0, 2, 1, 4, 3, 0, 4, 1]
REPO = Path(__file__).resolve().parents[3]


def lockstep(target, request, drafters, k: int = 4, rounds: int = len(ACCEPT), accept=ACCEPT, prepared=()):
    """Drive drafters through the same rounds (forced acceptance counts); return each round's proposals.

    The target verifies the first drafter's proposal; every drafter must propose the same tokens,
    hold the same number of cache entries and index them the same way. The drafters in ``prepared``
    start as the engine starts them: ``prepare`` before the first token is read, then ``begin``.
    """
    state = target.prefill(request, NEED)
    for d in prepared:
        d.prepare(target, state)
    x = int(state.first_logits.argmax())
    for d in drafters:
        d.begin(target, state, x)
    assert len({d.cache_length for d in drafters}) == 1
    seen = []
    for r in range(rounds):
        props = [d.propose(k) for d in drafters]
        assert all(p.tokens == props[0].tokens for p in props), (r, [p.tokens for p in props])
        assert len({d.cache_length for d in drafters}) == 1, (r, [d.cache_length for d in drafters])
        assert all(d._cache_index == drafters[0]._cache_index for d in drafters)
        seen.append(props[0].tokens)
        out = target.verify(state, [x, *props[0].tokens], NEED)
        n = min(accept[r % len(accept)], k)
        nxt = int(out.logits[n].argmax())
        target.rollback(state, state.length - k + n)
        for d in drafters:
            d.commit(n, nxt, out)
        x = nxt
    return seen


class BucketedDrafter(FastSparrowDrafter):
    """Eager steps that read the cache up to a bucket boundary, as graph steps do."""

    def _engine(self):
        e = super()._engine()
        self._bucketed = True
        return e


EmulatedGraphDrafter = emulated_graph_drafter_class()


# ---- parity with SparrowDrafter --------------------------------------------------------------------
@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("mode", ["target", "reindex"])
def test_proposals_match_sparrow_drafter_round_by_round(tiny, clip, name, mode):
    target = tiny(name)
    model = new_sparrow_for(target, position_mode=mode)
    eager, fast = SparrowDrafter(model), FastSparrowDrafter(model, max_len=512)
    bucketed = BucketedDrafter(model, max_len=512, bucket=8)  # attention over stale/unwritten slots
    lockstep(target, Request("Describe the video.", clip), [eager, fast, bucketed])
    assert not fast.graphs  # CPU: eager steps
    (shape,) = fast.cache_shapes()
    assert shape == (1, model.text_config.num_key_value_heads, fast.cache_length, model.layer.self_attn.head_dim)


@pytest.mark.parametrize("name", FAMILIES)
def test_prepare_then_begin_equals_begin(tiny, clip, name):
    """The engine feeds the prompt in ``prepare`` (in the prefill phase) and queues the first token in
    ``begin``: the same cache, index and proposals as ``begin`` alone, on every path."""
    target = tiny(name)
    model = new_sparrow_for(target)
    req = Request("What happens in this video?", clip)
    alone = SparrowDrafter(model)
    split = [SparrowDrafter(model), FastSparrowDrafter(model, max_len=256),
             EmulatedGraphDrafter(model, max_len=128, bucket=16, max_step=3)]
    state = target.prefill(req, NEED)
    for d in split:  # after prepare the prompt is fed and nothing is pending yet
        d.prepare(target, state)
        assert d.cache_length == text_positions(target, req) - 1 and not d._pending.tokens
    lockstep(target, req, [alone, *split], k=4, prepared=split)
    # begin for another request than the prepared one starts that request from scratch
    other = target.prefill(Request("Describe the video.", clip), NEED)
    split[1].prepare(target, state)
    split[1].begin(target, other, 5)
    alone.begin(target, other, 5)
    assert split[1].cache_length == alone.cache_length and split[1]._cache_index == alone._cache_index


@pytest.mark.parametrize("name", FAMILIES)
def test_emulated_graph_path_matches(tiny, clip, name):
    """Capture-time warm-ups leave no trace; replays chain tokens through the static buffers."""
    target = tiny(name)
    model = new_sparrow_for(target)
    eager = SparrowDrafter(model)
    graphed = EmulatedGraphDrafter(model, max_len=128, bucket=16, max_step=3)  # T = 4, 5 run eagerly
    req = Request("What happens in this video?", clip)
    lockstep(target, req, [eager, graphed], k=4)
    keys = set(graphed._eng.graphs)
    assert {t for t, _, _ in keys} <= {1, 2, 3} and 1 in {t for t, _, _ in keys}
    assert {k for _, k, _ in keys} == {4}  # one graph per round: the pending step and 3 chained steps
    assert all(lb % 16 == 0 for _, _, lb in keys)
    assert max(g.graph.replays for g in graphed._eng.graphs.values()) > 1  # reused, not recaptured


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("mode", ["target", "reindex"])
def test_sd_with_fast_sparrow_is_token_identical_to_ar(tiny, clip, name, mode):
    target = tiny(name)
    req = Request("Describe the video.", clip)
    ar = SpeculativeDecoder(target).generate(req, max_new_tokens=32)
    drafter = FastSparrowDrafter(new_sparrow_for(target, position_mode=mode))
    sd = SpeculativeDecoder(target, drafter, StrictVerifier(), k=3, method="sparrow").generate(req, max_new_tokens=32)
    assert sd.token_ids == ar.token_ids
    ref = SparrowDrafter(new_sparrow_for(target, position_mode=mode))
    sd_ref = SpeculativeDecoder(target, ref, StrictVerifier(), k=3, method="sparrow").generate(req, max_new_tokens=32)
    assert [s.accepted for s in sd.steps] == [s.accepted for s in sd_ref.steps]


@pytest.mark.parametrize("name", FAMILIES)
def test_fast_target_and_fast_sparrow_equal_ar(tiny, clip, name):
    from vidspec.decoding.fast import FastStrictVerifier, FastTarget

    target = tiny(name)
    req = Request("What happens in this video?", clip)
    ar = SpeculativeDecoder(target).generate(req, max_new_tokens=24)
    fast = FastTarget(target, max_len=512)
    drafter = FastSparrowDrafter(new_sparrow_for(target))
    sd = SpeculativeDecoder(fast, drafter, FastStrictVerifier(), k=4, method="sparrow").generate(req, max_new_tokens=24)
    assert sd.token_ids == ar.token_ids


def _device_round_runs(target_factory, target, req, k: int, budget: int):
    """The same Sparrow decode with device rounds on and off: (results, verify_device calls)."""
    from vidspec.decoding.fast import FastStrictVerifier
    from vidspec.decoding.testing import aligned_sparrow, device_round_runs

    model = aligned_sparrow(target)
    return device_round_runs(
        lambda on: SpeculativeDecoder(target_factory(), FastSparrowDrafter(model), FastStrictVerifier(), k=k,
                                      method="sparrow", device_rounds=on), req, budget, "verify_device")


@pytest.mark.parametrize("name", FAMILIES)
def test_device_rounds_match_host_rounds(tiny, clip, name):
    """Draft tokens fed to the verify step on the device (no host sync between them): the same rounds and
    tokens as the host-driven round, token-identical to AR, and the device path is the one taken."""
    from vidspec.decoding.fast import FastTarget

    target = tiny(name)
    req = Request("What happens in this video?", clip)
    ar = SpeculativeDecoder(target).generate(req, max_new_tokens=32)
    (on, off), (calls_on, calls_off) = _device_round_runs(lambda: FastTarget(target, max_len=512), target, req, 4, 32)
    assert_same_rounds(on, off, ar)
    assert sum(s.accepted for s in on.steps) > 0  # the aligned draft gets tokens accepted
    assert calls_on == sum(1 for s in on.steps if s.drafted > 0) and calls_off == 0


def test_greedy_rounds_copy_the_pending_states_as_one_block(tiny, clip, monkeypatch):
    """Every greedy round's pending states are the first rows of the last verify output (after begin: the
    prompt's last state), taken as one block, not stacked row by row; the decode stays identical to AR."""
    from vidspec.decoding.fast import FastStrictVerifier, FastTarget
    from vidspec.decoding.testing import aligned_sparrow

    target = tiny("tiny-llava-ov")
    req = Request("What happens in this video?", clip)
    ar = SpeculativeDecoder(target).generate(req, max_new_tokens=32)
    drafter = FastSparrowDrafter(aligned_sparrow(target))
    taken = []
    real = FastSparrowDrafter._pending_hidden

    def spy(self, p):
        block = self._block
        out = real(self, p)
        taken.append(block is not None and out is block[1])
        assert torch.equal(out, torch.stack(p.hidden))  # the same states either way
        return out

    monkeypatch.setattr(FastSparrowDrafter, "_pending_hidden", spy)
    res = SpeculativeDecoder(FastTarget(target, max_len=512), drafter, FastStrictVerifier(), k=4).generate(
        req, max_new_tokens=32)
    assert res.token_ids == ar.token_ids
    assert len(taken) == len(res.steps) > 2 and all(taken)


def test_step_tail_ids_equal_host_ids(tiny, clip):
    """FastLM.step with the last ids taken from a device tensor equals the step with all ids on the host."""
    from vidspec.decoding.fast import FastTarget
    from vidspec.decoding.fast.target import _tril

    fast = FastTarget(tiny("tiny-qwen2.5-vl"), max_len=512)
    state = fast.prefill(Request("Describe the video.", clip))
    toks = [int(state.first_logits.argmax()), 5, 6, 7]
    s, off = state.length, state.extra["offset"]
    a = fast.lm.step(toks, s, s, off, list(range(4)), _tril(4)).logits.clone()
    b = fast.lm.step([toks[0], 0, 0, 0], s, s, off, list(range(4)), _tril(4),
                     tail_ids=torch.tensor(toks[1:], device=fast.device)).logits.clone()
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="tail ids"):
        fast.lm.step(toks, s, s, off, list(range(4)), _tril(4), tail_ids=torch.arange(5))


def test_sampling_falls_back_to_host_choice(tiny, clip):
    """temperature > 0: the same generator draws give the same tokens and distributions as SparrowDrafter."""
    target = tiny("tiny-qwen2.5-vl")
    model = new_sparrow_for(target)
    a = SparrowDrafter(model, temperature=0.9, generator=torch.Generator().manual_seed(5))
    b = FastSparrowDrafter(model, temperature=0.9, generator=torch.Generator().manual_seed(5))
    state = target.prefill(Request("Describe the video.", clip), NEED)
    first = int(state.first_logits.argmax())
    a.begin(target, state, first)
    b.begin(target, state, first)
    pa, pb = a.propose(4), b.propose(4)
    assert pa.tokens == pb.tokens
    torch.testing.assert_close(pb.probs, pa.probs, rtol=1e-4, atol=1e-6)
    assert a.cache_length == b.cache_length


# ---- warm-up: every graph a round can meet is captured before timing ---------------------------------
@pytest.mark.parametrize("name", FAMILIES)
def test_warmup_captures_every_round_graph_and_leaves_outputs_identical(tiny, clip, name):
    """After warmup(k) no decode captures a graph (pending T = 1..K+1, every bucket up to max_text)."""
    target = tiny(name)
    model = new_sparrow_for(target)
    req = Request("What happens in this video?", clip)
    k, rounds = 4, len(ACCEPT)
    max_text = text_positions(target, req) + rounds * (k + 1) + k + 1
    ref = lockstep(target, req, [SparrowDrafter(model)], k=k)

    graphed = EmulatedGraphDrafter(model, max_len=128, bucket=16)
    n = graphed.warmup(target, k, max_text=max_text)
    buckets = graphed.warmup_buckets(max_text)
    assert len(buckets) > 1 and buckets == tuple(range(16, buckets[-1] + 1, 16))
    # chains of T = 1..K+1 pending tokens and k = K draft steps (k = 1 too, for sampling) ending in each bucket:
    # a round near the budget runs the K chain and keeps its first tokens
    assert n == graphed.graph_captures == len(graphed._eng.graphs) == (k + 1) * 2 * len(buckets)
    assert {kk for _, kk, _ in graphed._eng.graphs} == {1, k}
    assert graphed.warmup(target, k, max_text=max_text) == 0  # nothing left to capture
    # ACCEPT has 0..4 accepted tokens, so rounds run every pending length 1..5
    assert lockstep(target, req, [SparrowDrafter(model), graphed], k=k) == ref
    assert graphed.graph_captures == n, "a graph was captured inside a decode"
    assert sum(g.graph.replays for g in graphed._eng.graphs.values()) > rounds  # the decode ran the graphs
    cold = EmulatedGraphDrafter(model, max_len=128, bucket=16)
    lockstep(target, req, [cold], k=k)
    assert cold.graph_captures > 1  # without the warm-up the rounds capture as they go

    ar = SpeculativeDecoder(target).generate(req, max_new_tokens=24)
    sd = SpeculativeDecoder(target, graphed, StrictVerifier(), k=k, method="sparrow").generate(req, max_new_tokens=24)
    assert sd.token_ids == ar.token_ids and sd.finish_reason == "length"
    assert min(s.drafted for s in sd.steps) < k, "the budget cut no round short: the test checks nothing"
    assert graphed.graph_captures == n


@pytest.mark.parametrize("name", FAMILIES)
def test_a_short_proposal_after_warmup_is_the_head_of_the_k_chain(tiny, clip, name):
    """After warmup(K), propose(k < K) runs the K-token chain and keeps its first k tokens: the same tokens,
    cache and index (after commit) as a drafter that runs k-token chains, in every round."""
    target = tiny(name)
    model = aligned_sparrow(target)
    req = Request("What happens in this video?", clip)
    warm = EmulatedGraphDrafter(model, max_len=128, bucket=16)
    warm.warmup(target, 4, max_text=96)
    plain = EmulatedGraphDrafter(model, max_len=128, bucket=16)
    drafters = [SparrowDrafter(model), warm, plain]
    state = target.prefill(req, NEED)
    x = int(state.first_logits.argmax())
    for d in drafters:
        d.begin(target, state, x)
    for r, n_acc in enumerate(ACCEPT):
        props = [d.propose(2).tokens for d in drafters]
        assert props[1] == props[2] == props[0], (r, props)
        assert warm.cache_length == plain.cache_length + 2  # the K = 4 chain ran: two more speculative slots
        out = target.verify(state, [x, *props[0]], NEED)
        n = min(n_acc, 2)
        x = int(out.logits[n].argmax())
        target.rollback(state, state.length - 2 + n)
        for d in drafters:
            d.commit(n, x, out)
        # commit crops the speculative slots: the next round starts from the same cache
        assert warm._cache_index == plain._cache_index == drafters[0]._cache_index
        assert warm.cache_length == plain.cache_length
    assert warm._chain_length(2) == 4 and plain._chain_length(2) == 2 and warm._chain_length(4) == 4
    assert {kk for _, kk, _ in warm._eng.graphs} == {1, 4}  # the k = 2 rounds replayed the K = 4 chains


def test_warmup_without_graphs_is_a_no_op(tiny, clip):
    target = tiny("tiny-llava-ov")
    req = Request("Describe the video.", clip)
    ar = SpeculativeDecoder(target).generate(req, max_new_tokens=16)
    drafter = FastSparrowDrafter(new_sparrow_for(target))
    assert drafter.warmup(target, 4, max_text=4096) == 0
    assert not drafter.graphs and drafter.graph_captures == 0 and not drafter._eng.graphs
    assert drafter.warmup_buckets(4096) == ()  # exact lengths off the graph path
    dec = SpeculativeDecoder(target, drafter, StrictVerifier(), k=4, method="sparrow")
    assert dec.generate(req, max_new_tokens=16).token_ids == ar.token_ids
    # a warm-up between requests is harmless too
    drafter.warmup(target, 4)
    assert dec.generate(req, max_new_tokens=16).token_ids == ar.token_ids


def test_warmup_ends_a_live_request(tiny, clip):
    target = tiny("tiny-llava-ov")
    graphed = EmulatedGraphDrafter(new_sparrow_for(target), max_len=128, bucket=16)
    state = target.prefill(Request("Describe the video.", clip), NEED)
    graphed.begin(target, state, int(state.first_logits.argmax()))
    graphed.warmup(target, 2)
    with pytest.raises(RuntimeError, match="begin"):
        graphed.propose(2)  # its cache slots were overwritten by the warm-up steps
    with pytest.raises(ValueError):
        graphed.warmup(target, -1)


def test_round_timings_split_decode_time(tiny, clip):
    """begin_s and each round's draft_s / verify_s are disjoint parts of decode_s."""
    target = tiny("tiny-qwen2.5-vl")
    dec = SpeculativeDecoder(target, FastSparrowDrafter(new_sparrow_for(target)), StrictVerifier(), k=4,
                             method="sparrow")
    res = dec.generate(Request("Describe the video.", clip), max_new_tokens=20)
    t = res.timings
    assert res.steps and t.begin_s > 0
    assert all(s.draft_s > 0 and s.verify_s > 0 for s in res.steps)
    assert t.begin_s + sum(s.draft_s + s.verify_s for s in res.steps) <= t.decode_s <= t.wall_s


# ---- the cache: text positions only, O(1) rollback ---------------------------------------------------
@pytest.mark.parametrize("name", FAMILIES)
def test_draft_cache_holds_text_positions_only(tiny, name):
    target = tiny(name)
    model = new_sparrow_for(target)
    lengths, visual = [], []
    for frames in (2, 12):
        req = Request("Describe the video.", make_clip(frames))
        state = target.prefill(req, NEED)
        drafter = FastSparrowDrafter(model, max_len=256)
        drafter.begin(target, state, int(state.first_logits.argmax()))
        n_text = text_positions(target, req)
        assert drafter.cache_length == n_text - 1  # prompt text positions from index 1 on
        assert all(i not in set(state.visual_positions.tolist()) for i in drafter._cache_index)
        drafter.propose(4)
        assert drafter.cache_length == n_text - 1 + 4  # + x_last + 3 speculative entries
        (shape,) = drafter.cache_shapes()
        assert shape[2] == drafter.cache_length
        assert drafter.cache.kv.shape[2] == drafter.capacity == 256  # preallocated, independent of the video
        lengths.append(drafter.cache_length)
        visual.append(int(state.visual_positions.numel()))
    assert visual[1] > visual[0] > 0
    assert lengths[0] == lengths[1]


@pytest.mark.parametrize("name", FAMILIES)
def test_rollback_after_partial_acceptance(tiny, clip, name):
    target = tiny(name)
    model = new_sparrow_for(target)
    req = Request("Describe the video.", clip)
    state = target.prefill(req, NEED)
    first = int(state.first_logits.argmax())
    eager, fast = SparrowDrafter(model), FastSparrowDrafter(model)
    for d in (eager, fast):
        d.begin(target, state, first)
    base = fast.cache_length
    prop = fast.propose(4)
    assert eager.propose(4).tokens == prop.tokens
    kv_before = fast.cache.kv.clone()
    out = target.verify(state, [first, *prop.tokens], NEED)
    target.rollback(state, state.length - 4 + 1)
    for d in (eager, fast):
        d.commit(1, 7, out)
    # x_last stays; the speculative entries are dropped by the length counter alone (O(1)): their
    # K/V are still in the buffer, masked until overwritten
    assert fast.cache_length == base + 1
    assert torch.equal(fast.cache.kv, kv_before)
    assert fast._cache_index == eager._cache_index
    p2 = fast.propose(2)
    assert p2.tokens == eager.propose(2).tokens
    assert fast.cache_length == eager.cache_length == base + 1 + 2 + 1


def test_capacity_is_enforced(tiny, clip):
    target = tiny("tiny-llava-ov")
    state = target.prefill(Request("Describe the video.", clip), NEED)
    first = int(state.first_logits.argmax())
    n = int((state.prompt_ids != target.video_token_id).sum()) - 1
    with pytest.raises(ValueError, match="raise max_len"):
        FastSparrowDrafter(new_sparrow_for(target), max_len=n).begin(target, state, first)
    d = FastSparrowDrafter(new_sparrow_for(target), max_len=n + 3)
    d.begin(target, state, first)
    with pytest.raises(ValueError, match="raise max_len"):
        d.propose(4)  # x_last + 3 speculative entries do not fit
    assert len(d.propose(3).tokens) == 3


def test_from_pretrained_and_lazy_import(tiny, clip, tmp_path):
    from vidspec.decoding import fast

    assert fast.FastSparrowDrafter is FastSparrowDrafter
    target = tiny("tiny-qwen2.5-vl")
    model = new_sparrow_for(target, position_mode="reindex", seed=2)
    model.save_pretrained(tmp_path / "rel", manifest=model.manifest)
    d = FastSparrowDrafter.from_pretrained(tmp_path / "rel", target, temperature=0.0, allow_target_mismatch=False,
                                           max_len=300, max_draft=2)
    assert isinstance(d, FastSparrowDrafter) and isinstance(d, SparrowDrafter)
    assert d.capacity == 300 and d.name.startswith("sparrow")
    ref = SparrowDrafter.from_pretrained(tmp_path / "rel", target)
    # k > max_draft takes the host loop; same tokens
    lockstep(target, Request("Describe the video.", clip), [ref, d], k=3, rounds=3)


def test_benchmark_smoke(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "packages" / "decoding" / "src")}
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "sparrow_draft_step_gpu.py"), "--smoke",
                           "--device", "cpu", "--families", "qwen2.5-vl", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    res = json.loads((tmp_path / "sparrow_draft_step_gpu_smoke.json").read_text())
    assert res["machine"]["device"] == "cpu"
    rows = res["rows"]
    assert {r["visual_tokens"] for r in rows} == {64, 256}
    assert all(r["same_tokens"] for r in rows)
    # VATA: the draft's cache does not grow with the video
    assert len({r["draft_cache_entries"] for r in rows if r["pending"] == 1}) == 1


# ---- the kernel path on CPU, through Triton's interpreter --------------------------------------------------
RUN_KERNELS_ON_CPU = os.environ.get("TRITON_INTERPRET") == "1" and importlib.util.find_spec("triton") is not None


@pytest.mark.skipif(not RUN_KERNELS_ON_CPU, reason="needs Triton with TRITON_INTERPRET=1 (on CUDA: the gpu tests)")
@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("vocab", [None, 40])
def test_kernel_path_matches_sparrow_drafter_in_the_interpreter(tiny, clip, name, vocab):
    """Fused weights, the Triton RoPE/KV-write and attention kernels, the [slot, base, ...] arena, chained steps."""
    target = tiny(name)
    model = copy.deepcopy(new_sparrow_for(target))  # fusing re-points the layer's weights: keep the shared one
    head = None if vocab is None else _subset(target, vocab)
    ref = SparrowDrafter(model, head_ids=head)
    fast = FastSparrowDrafter(model, kernels=True, compile=False, head_ids=head)
    # the graph path too: the prompt fed through T-step "graphs", one chain per round
    graphed = EmulatedGraphDrafter(model, kernels=True, compile=False, head_ids=head)
    lockstep(target, Request("Describe the video.", clip), [ref, fast, graphed], k=4)
    # A prompt of more than one feed chunk (PREFILL_T text positions), its last chunk padded; started
    # as the engine starts it (prepare in the prefill, then begin), twice: the second request reuses
    # the feed's source rows kept for its prompt layout.
    long = "Describe the video: every object, its colour and shape, where it moves, and what disappears, in detail."
    for _ in range(2):
        with torch.no_grad():  # the fast drafters fused the shared layer's weights in inference mode
            lockstep(target, Request(long, clip), [ref, fast, graphed], k=4, prepared=[fast, graphed])
    assert len(graphed._feed_src) == 2  # two prompt layouts seen, each copied once
    assert graphed._n_text_prompt > PREFILL_T + 1
    assert fast.kernels and not fast.graphs and graphed.kernels
    keys = set(graphed._eng.graphs)
    assert all(lb == 0 for _, _, lb in keys)  # no buckets
    assert {k for _, k, _ in keys} == {1, 4}  # the prompt feed's single step and the rounds' chains
    assert {t for t, k, _ in keys if k == 1} == {PREFILL_T}  # every feed chunk padded to one T
    # the rounds' chains ran fused (each step fed by the last one's outputs), eagerly and as "graphs"
    assert {k for _, k in fast._eng.plans} == {k for _, k in graphed._eng.plans} == {4}


# ---- draft vocabulary (head_ids) -------------------------------------------------------------------------
def _subset(target, n: int, seed: int = 0) -> torch.Tensor:
    vocab = target.model.lm_head.out_features
    return torch.randperm(vocab, generator=torch.Generator().manual_seed(seed))[:n]


@pytest.mark.parametrize("name", FAMILIES)
def test_full_draft_vocabulary_in_any_order_changes_nothing(tiny, clip, name):
    target = tiny(name)
    model = new_sparrow_for(target)
    perm = _subset(target, target.model.lm_head.out_features)
    lockstep(target, Request("Describe the video.", clip),
             [SparrowDrafter(model), SparrowDrafter(model, head_ids=perm), FastSparrowDrafter(model, head_ids=perm)])


@pytest.mark.parametrize("name", FAMILIES)
def test_draft_vocabulary_proposes_only_its_tokens_on_every_path(tiny, clip, name):
    target = tiny(name)
    model = new_sparrow_for(target)
    sub = _subset(target, 40)
    drafters = [SparrowDrafter(model, head_ids=sub), FastSparrowDrafter(model, head_ids=sub),
                EmulatedGraphDrafter(model, max_len=128, bucket=16, head_ids=sub)]
    seen = lockstep(target, Request("Describe the video.", clip), drafters)
    allowed = set(sub.tolist())
    assert all(t in allowed for toks in seen for t in toks)
    full = lockstep(target, Request("Describe the video.", clip), [SparrowDrafter(model)])
    assert seen != full  # 40 of the vocabulary: the draft's favourite tokens are often outside


@pytest.mark.parametrize("fast", [False, True])
def test_draft_vocabulary_stays_lossless(tiny, clip, fast):
    target = tiny("tiny-qwen2.5-vl")
    req = Request("What happens in this video?", clip)
    ar = SpeculativeDecoder(target).generate(req, max_new_tokens=24)
    cls = FastSparrowDrafter if fast else SparrowDrafter
    drafter = cls(new_sparrow_for(target), head_ids=_subset(target, 64))
    sd = SpeculativeDecoder(target, drafter, StrictVerifier(), k=4, method="sparrow").generate(req, max_new_tokens=24)
    assert sd.token_ids == ar.token_ids


def test_sampled_drafts_report_full_vocabulary_distributions(tiny, clip):
    target = tiny("tiny-llava-ov")
    sub = _subset(target, 50)
    d = SparrowDrafter(new_sparrow_for(target), temperature=1.0, generator=torch.Generator().manual_seed(0),
                       head_ids=sub)
    state = target.prefill(Request("Describe the video.", clip), NEED)
    d.begin(target, state, int(state.first_logits.argmax()))
    prop = d.propose(3)
    vocab = target.model.lm_head.out_features
    assert prop.probs.shape == (3, vocab)
    assert torch.allclose(prop.probs.sum(-1), torch.ones(3))
    outside = torch.ones(vocab, dtype=torch.bool)
    outside[sub] = False
    assert float(prop.probs[:, outside].abs().sum()) == 0.0
    assert all(float(prop.probs[i, t]) > 0 for i, t in enumerate(prop.tokens))


def test_bad_draft_vocabulary_is_one_clear_error(tiny):
    model = new_sparrow_for(tiny("tiny-llava-ov"))
    vocab = model.config.vocab_size
    for bad, msg in (([], "empty"), ([0, vocab], "token ids in"), ([-1, 3], "token ids in"), ([5, 5], "repeated")):
        with pytest.raises(ValueError, match=msg):
            SparrowDrafter(model, head_ids=bad)


# The records of an archived H200 captions run, the replay's input (gzipped; replay_7b reads .jsonl and
# .jsonl.gz alike).
RECORDS = REPO / "benchmarks" / "results" / "replay_7b_input_captions_h200.records.jsonl.gz"


def test_replay_schedules_recover_each_rounds_acceptance():
    """acceptance_by_position -> per-round acceptance counts that add up to each record's totals."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import replay_7b

    recs = [json.loads(line) for line in gzip.decompress(RECORDS.read_bytes()).decode().splitlines()]
    recs = [r for r in recs if r["method"] == "sparrow"][:10]
    got = replay_7b.schedules(RECORDS, "sparrow", 10)
    for r, ns in zip(recs, got):
        assert len(ns) == r["target_passes"] and sum(ns) == r["accepted"]
        assert all(0 <= n <= r["k"] for n in ns)
        assert sum(ns) + len(ns) + 1 >= r["num_new_tokens"]  # the last round may be clipped at EOS
    with pytest.raises(SystemExit, match="no 'nope' records"):
        replay_7b.schedules(RECORDS, "nope", 3)


def test_replay_schedules_handle_a_last_round_cut_by_the_budget(tmp_path):
    """Rounds (n accepted of k drafted): (4/4), (2/4), (1/2 at the token budget) -> acceptance_by_position
    is over 3, 3, 2, 2 rounds; the schedule must still sum to the accepted tokens."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import replay_7b

    from vidspec.decoding.types import GenerationResult, StepRecord, Timings

    steps = (StepRecord(drafted=4, accepted=4, emitted=5), StepRecord(drafted=4, accepted=2, emitted=3),
             StepRecord(drafted=2, accepted=1, emitted=2))
    res = GenerationResult(method="sparrow", text="", token_ids=tuple(range(11)), steps=steps,
                           timings=Timings(prefill_s=0.0, decode_s=1.0, wall_s=1.0), finish_reason="length")
    rec = {"method": "sparrow", "sample_id": "s", "k": 4, "target_passes": 3, "drafted": 10, "accepted": 7,
           "acceptance_by_position": res.acceptance_by_position()}
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    (ns,) = replay_7b.schedules(path, "sparrow", 5)
    assert sorted(ns, reverse=True) == [4, 2, 1]


def test_replay_benchmark_smoke(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "packages" / "decoding" / "src")}
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "replay_7b.py"), "--smoke", "--device", "cpu",
                           "--records", str(RECORDS), "--families", "llava-ov", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    res = json.loads((tmp_path / "replay_7b_smoke.json").read_text())
    rows = {r["method"]: r for r in res["rows"]}
    assert set(rows) == {"sparrow", "sparrow-lvspec-pst"}
    for r in rows.values():
        assert r["ar_ms_per_token"] > 0 and r["method_ms_per_token"] > 0 and r["dsr"] > 0
        assert r["tau"] > 1  # replayed from the records: more than one token per verify pass
    # The replayed rounds are the records' own: τ is what their acceptance counts give (2 samples in --smoke).
    sys.path.insert(0, str(REPO / "benchmarks"))
    import replay_7b

    for m, r in rows.items():
        sched = replay_7b.schedules(RECORDS, m, 2)
        assert r["tau"] == pytest.approx(sum(sum(ns) + len(ns) for ns in sched) / sum(len(ns) for ns in sched))


# ---- CUDA ---------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("mode", ["target", "reindex"])
def test_cuda_graph_proposals_match_eager_fp32(cuda_tiny_fp32, clip, name, mode):
    target = cuda_tiny_fp32(name)
    model = new_sparrow_for(target, position_mode=mode)
    eager = FastSparrowDrafter(model, graphs=False, kernels=False)
    graphed = FastSparrowDrafter(model, graphs=True, bucket=16, kernels=False)
    ref = SparrowDrafter(model)
    lockstep(target, Request("Describe the video.", clip), [ref, eager, graphed], k=5)
    assert graphed.graphs and not eager.graphs and not graphed.kernels
    assert len(graphed._eng.graphs) >= 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("graphs", [False, True])
def test_cuda_kernel_path_proposals_match_eager_fp32(cuda_tiny_fp32, clip, name, graphs):
    """Triton RoPE/KV-write + attention kernels, fused q/k/v and gate/up weights, chains as one graph."""
    target = cuda_tiny_fp32(name)
    model = new_sparrow_for(target)
    ref = SparrowDrafter(model)
    fast = FastSparrowDrafter(model, graphs=graphs, kernels=True, compile=False)
    lockstep(target, Request("Describe the video.", clip), [ref, fast], k=5)
    assert fast.kernels and fast.graphs == graphs
    if graphs:
        # rounds: one graph per pending length with k = 5; the prompt feed: single steps (k = 1)
        assert {k for _, k, _ in fast._eng.graphs} == {1, 5} and all(lb == 0 for _, _, lb in fast._eng.graphs)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", FAMILIES)
def test_cuda_kernel_path_with_a_draft_vocabulary_matches_eager_fp32(cuda_tiny_fp32, clip, name):
    target = cuda_tiny_fp32(name)
    model = new_sparrow_for(target)
    sub = _subset(target, 40)
    ref = SparrowDrafter(model, head_ids=sub)
    fast = FastSparrowDrafter(model, kernels=True, compile=False, head_ids=sub)
    seen = lockstep(target, Request("Describe the video.", clip), [ref, fast], k=5)
    assert fast.kernels and fast.graphs
    assert all(t in set(sub.tolist()) for toks in seen for t in toks)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", FAMILIES)
def test_cuda_compiled_kernel_path_is_lossless(cuda_tiny_fp32, clip, name):
    """The default CUDA drafter (kernels + torch.compile + chained graphs) with a compiled FastTarget equals AR."""
    from vidspec.decoding.fast import FastStrictVerifier, FastTarget

    target = cuda_tiny_fp32(name)
    req = Request("What happens in this video?", clip)
    ar = SpeculativeDecoder(FastTarget(target)).generate(req, max_new_tokens=48)
    drafter = FastSparrowDrafter(new_sparrow_for(target))
    fast = FastTarget(target)
    assert drafter.warmup(fast, 4) > 0
    dec = SpeculativeDecoder(fast, drafter, FastStrictVerifier(), k=4, method="sparrow")
    sd = dec.generate(req, max_new_tokens=48)
    assert drafter.kernels and drafter.graphs
    assert sd.token_ids == ar.token_ids


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", FAMILIES)
def test_cuda_fast_target_with_fast_sparrow_equals_ar(cuda_tiny_fp32, clip, name):
    from vidspec.decoding.fast import FastStrictVerifier, FastTarget

    target = cuda_tiny_fp32(name)
    req = Request("What happens in this video?", clip)
    ar = SpeculativeDecoder(FastTarget(target, compile=False)).generate(req, max_new_tokens=48)
    drafter = FastSparrowDrafter(new_sparrow_for(target))
    dec = SpeculativeDecoder(FastTarget(target, compile=False), drafter, FastStrictVerifier(), k=5, method="sparrow")
    sd = dec.generate(req, max_new_tokens=48)
    assert drafter.graphs
    assert sd.token_ids == ar.token_ids


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", FAMILIES)
def test_cuda_warmup_leaves_no_capture_for_the_decode(cuda_tiny_fp32, clip, name):
    """FastTarget.warmup (verify T = 1..K+1) and FastSparrowDrafter.warmup: the decode then captures nothing."""
    from vidspec.decoding.fast import FastStrictVerifier, FastTarget

    target = cuda_tiny_fp32(name)
    req = Request("What happens in this video?", clip)
    k, budget = 4, 48
    ar = SpeculativeDecoder(FastTarget(target, compile=False)).generate(req, max_new_tokens=budget)
    fast = FastTarget(target, compile=False)
    drafter = FastSparrowDrafter(new_sparrow_for(target), bucket=16)
    dec = SpeculativeDecoder(fast, drafter, FastStrictVerifier(), k=k, method="sparrow")
    prompt = int(fast.build_prompt(req)[0].shape[0])
    assert fast.warmup(tuple(range(1, k + 2)), fast.warmup_contexts(prompt, prompt + budget + k + 1)) > 0
    assert drafter.warmup(fast, k, max_text=text_positions(target, req) + budget + k + 1) > 0
    graphs_t, graphs_d = len(fast.lm._graphs), drafter.graph_captures
    sd = dec.generate(req, max_new_tokens=budget)
    assert sd.token_ids == ar.token_ids
    assert len(fast.lm._graphs) == graphs_t and drafter.graph_captures == graphs_d


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", FAMILIES)
def test_cuda_device_rounds_match_host_rounds(cuda_tiny_fp32, clip, name):
    """On CUDA (graphs, kernels): draft and verify launched back to back give the host-driven rounds, losslessly."""
    from vidspec.decoding.fast import FastTarget

    target = cuda_tiny_fp32(name)
    req = Request("What happens in this video?", clip)
    ar = SpeculativeDecoder(FastTarget(target)).generate(req, max_new_tokens=48)
    (on, off), (calls_on, _) = _device_round_runs(lambda: FastTarget(target), target, req, 4, 48)
    assert_same_rounds(on, off, ar)
    assert calls_on > 0
