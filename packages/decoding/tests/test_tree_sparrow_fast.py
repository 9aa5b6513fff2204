"""FastTreeSparrowDrafter (the tree grown on the device, one graph per round) against TreeSparrowDrafter.

CPU tests run the device-side growth eagerly, and once through an emulation of the graph path
(capture-time warm-ups and restores, static record buffers, bucketed attention over stale slots).
With ``TRITON_INTERPRET=1`` the kernel path (pending step and tree levels on the Triton kernels)
runs on CPU too, through Triton's interpreter.
The GPU test (``pytest -m gpu packages/decoding/tests/test_tree_sparrow_fast.py``) replays real
CUDA graphs.

On the tiny models the fast path's layer functions give the eager HF layer's numbers exactly
(fp32, CPU), so trees are compared exactly: tokens, parents and scores; the aligned draft's
scores have no ties at these shapes (a tie would make top-k order a coin flip on both sides).
"""

from __future__ import annotations

import copy
import importlib.util
import os

import pytest
import torch

from vidspec.decoding.drafters.sparrow_tree import TreeSparrowDrafter
from vidspec.decoding.fast import FastTarget, FastTreeSparrowDrafter
from vidspec.decoding.fast.sparrow_tree_drafter import _TreeGraph, node_depths, tree_size
from vidspec.decoding.loops.chain import SpeculativeDecoder
from vidspec.decoding.loops.tree import TreeSpeculativeDecoder
from vidspec.decoding.testing import (
    aligned_sparrow,
    assert_same_rounds,
    begin_drafter,
    device_round_runs,
    emulated_graph_drafter_class,
)
from vidspec.decoding.trees import (
    best_path,
    rerank_device,
    rerank_tree,
    tree_mask_and_depth,
    verify_tree_inputs,
)
from vidspec.decoding.types import Request, VerifyOutput

FAMILIES = ["tiny-qwen2.5-vl", "tiny-llava-ov"]
NEED = frozenset({"penult"})
SHAPES = [(4, 4, 12), (3, 3, 100), (1, 5, 3), (5, 2, 7)]  # (depth, top_k, total)
HEAD_IDS = list(range(0, 512, 2))  # a draft vocabulary of every other token id




class _RerunGraph:
    """A stand-in CUDA graph on CPU: replay reruns the captured round into the static record buffer."""

    def __init__(self, drafter, key):
        self.drafter, self.key = drafter, key
        self.replays = 0

    def replay(self) -> None:
        self.drafter._grow(*self.key)  # writes the same static buffer the "capture" returned
        self.replays += 1


class _RerunPost:
    """A stand-in CUDA graph of the post-processing: replay reruns it into the "captured" static outputs."""

    def __init__(self, drafter, key, out):
        self.drafter, self.key, self.out = drafter, key, out
        self.replays = 0

    def replay(self) -> None:
        new = self.drafter._post(*self.key)
        for a, b in zip((*_fields(self.out), *self.out.verify), (*_fields(new), *new.verify)):
            a.copy_(b)
        self.replays += 1


def _fields(tree):
    return tree.tokens, tree.parents, tree.scores, tree.depths


class EmulatedGraphTree(FastTreeSparrowDrafter):
    """The graph path on CPU: rounds keyed by (T, depth, top_k, bucket), captured once and replayed;
    the device rounds' post-processing keyed by (depth, top_k, total), the same way."""

    chain_class = emulated_graph_drafter_class()

    def _record(self, key):
        c = self.chain
        snap = c._snapshot()
        out = self._grow(*key)  # a real capture does not execute: undo the chaining writes
        c._restore(snap)
        return _TreeGraph(_RerunGraph(self, key), out)

    def _record_post(self, key):
        out = self._post(*key)
        for x in (*_fields(out), *out.verify):  # a real capture leaves its outputs unwritten
            x.zero_()
        return _RerunPost(self, key, out), out


def same_tree(a, b) -> None:
    assert a.tokens == b.tokens and a.parents == b.parents
    torch.testing.assert_close(torch.tensor(a.scores), torch.tensor(b.scores), rtol=0, atol=1e-5)


def lockstep_trees(target, req, drafters, shapes):
    """Rounds of trees from every drafter (the first's tree verified, its strict path committed to all)."""
    state, x = begin_drafter(target, drafters[0], req)
    for d in drafters[1:]:
        d.begin(target, state, x)
    accepted_total = 0
    for depth, top_k, total in shapes:
        trees = [d.propose_tree(depth, top_k, total) for d in drafters]
        for t in trees[1:]:
            same_tree(trees[0], t)
        assert len({d.cache_length for d in drafters}) == 1
        tree = trees[0]
        tokens, parents = tree.with_root(x)
        out = target.verify_tree(state, tokens, parents, NEED)
        path, n = best_path(tokens, parents, [0.0, *tree.scores], out.logits.argmax(-1).tolist())
        path = path[: n + 1]
        target.commit_tree(state, path)
        idx = torch.tensor(path)
        rows = VerifyOutput(logits=out.logits[idx], hidden_penult=out.hidden_penult[idx])
        nxt = int(out.logits[path[-1]].argmax())
        for d in drafters:
            d.commit([tokens[i] for i in path[1:]], nxt, rows)
        accepted_total += n
        x = nxt
    return accepted_total


def test_tree_sizes_and_depths():
    assert tree_size(1, 8) == 8 and tree_size(3, 2) == 2 + 2 * 4
    assert node_depths(3, 2) == [1, 1, 2, 2, 2, 2, 3, 3, 3, 3]


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("head_ids", [None, HEAD_IDS], ids=["full", "vocab"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(map(str, s)))
def test_first_tree_equals_the_eager_tree(tiny, clip, drafts, name, head_ids, shape):
    target = tiny(name)
    req = Request("Describe the video.", clip)
    eager = TreeSparrowDrafter(drafts(name), head_ids=head_ids)
    fast = FastTreeSparrowDrafter(drafts(name), head_ids=head_ids, max_len=512)
    state, first = begin_drafter(target, eager, req)
    fast.begin(target, state, first)
    base = fast.cache_length
    same_tree(eager.propose_tree(*shape), fast.propose_tree(*shape))
    assert not fast.graphs  # CPU: the growth runs eagerly
    assert fast.cache_length == eager.cache_length == base + 1  # x_last stays, the tree's entries go


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("head_ids", [None, HEAD_IDS], ids=["full", "vocab"])
def test_rounds_equal_the_eager_drafter_after_each_commit(tiny, clip, drafts, name, head_ids):
    """Several rounds (pending steps of T = 1 and longer, several shapes): every tree equals the eager
    drafter's after the same committed paths, and the pending inputs and cache indices match."""
    target = tiny(name)
    eager = TreeSparrowDrafter(drafts(name), head_ids=head_ids)
    fast = FastTreeSparrowDrafter(drafts(name), head_ids=head_ids, max_len=512)
    shapes = [(4, 4, 12), (3, 3, 10), (5, 2, 9), (4, 4, 16), (2, 3, 5), (4, 4, 12)]
    accepted = lockstep_trees(target, Request("What happens in this video?", clip), [eager, fast], shapes)
    assert accepted > 0  # paths were accepted, so later rounds start with several pending tokens
    c, f = eager.chain, fast.chain
    assert c._pending.tokens == f._pending.tokens and c._pending.index == f._pending.index
    assert all(torch.equal(x, y) for x, y in zip(c._pending.hidden, f._pending.hidden))
    assert c._cache_index == f._cache_index and eager.cache_length == fast.cache_length


@pytest.mark.parametrize("name", FAMILIES)
def test_emulated_graph_path_equals_the_eager_drafter(tiny, clip, drafts, name):
    """Capture-time warm-ups leave no trace; bucketed rounds replay through the static record buffer."""
    target = tiny(name)
    eager = TreeSparrowDrafter(drafts(name))
    graphed = EmulatedGraphTree(drafts(name), max_len=256, bucket=32, max_step=3)
    shapes = [(4, 4, 12)] * 6 + [(2, 4, 6)]
    lockstep_trees(target, Request("Describe the video.", clip), [eager, graphed], shapes)
    assert graphed.graphs
    keys = set(graphed._graphs)
    assert keys and all(lb % 32 == 0 for *_, lb in keys) and {k for _, _, k, _ in keys} == {4}
    assert {t for t, *_ in keys} <= {1, 2, 3}  # longer pending steps run eagerly
    assert graphed.graph_captures == len(keys)
    assert max(g.graph.replays for g in graphed._graphs.values()) > 1  # reused, not recaptured


def test_warmup_captures_every_round_graph_of_a_decode(tiny, clip, drafts):
    """Emulated graphs: after warmup(depth, top_k, max_text) a whole decode captures nothing new."""
    name = "tiny-llava-ov"
    target = tiny(name)
    req = Request("Describe the video.", clip)
    graphed = EmulatedGraphTree(drafts(name), max_len=256, bucket=32)
    begin_drafter(target, graphed, req)
    max_new = 24
    captured = graphed.warmup(target, depth=4, top_k=4, max_text=graphed.cache_length + max_new + 4 * 4)
    assert captured == graphed.graph_captures > 0 and graphed.chain.cache is None
    assert graphed.warmup(target, depth=4, top_k=4, max_text=graphed.cache_length + max_new + 4 * 4) == 0
    ar = SpeculativeDecoder(target).generate(req, max_new_tokens=max_new)
    dec = TreeSpeculativeDecoder(target, graphed, total_tokens=12, depth=4, top_k=4, method="tree-sparrow")
    assert dec.generate(req, max_new_tokens=max_new).token_ids == ar.token_ids
    assert graphed.graph_captures == captured


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("fast_target", [False, True], ids=["eager-target", "fast-target"])
def test_tree_decoding_with_the_fast_tree_drafter_equals_ar(tiny, clip, drafts, name, fast_target):
    target = tiny(name)
    req = Request("Describe the video.", clip)
    ar = SpeculativeDecoder(target).generate(req, max_new_tokens=32)
    ref = TreeSpeculativeDecoder(target, TreeSparrowDrafter(drafts(name)), total_tokens=12, depth=4,
                                 top_k=4).generate(req, max_new_tokens=32)
    tgt = FastTarget(target, max_len=512) if fast_target else target
    dec = TreeSpeculativeDecoder(tgt, FastTreeSparrowDrafter(drafts(name), max_len=512), total_tokens=12,
                                 depth=4, top_k=4, method="tree-sparrow")
    res = dec.generate(req, max_new_tokens=32)
    assert res.token_ids == ar.token_ids
    assert [s.accepted for s in res.steps] == [s.accepted for s in ref.steps]  # the same trees
    assert sum(s.accepted for s in res.steps) > 0


def test_device_rerank_and_verify_inputs_equal_the_host_ones():
    """rerank_device keeps the nodes rerank_tree keeps, in its order (ties included), and verify_tree_inputs
    builds tree_mask_and_depth's verify tree, on random growths of every small shape."""
    import random

    rng = random.Random(0)
    for _ in range(150):
        depth, k = rng.randint(1, 5), rng.randint(1, 5)
        deps = node_depths(depth, k)
        par = [-1] * k
        for i in range(k, len(deps)):
            par.append(rng.choice([j for j in range(i) if deps[j] == deps[i] - 1]))
        toks = [rng.randrange(50) for _ in deps]
        sc: list[float] = []
        for p in par:  # a child never scores above its parent; equal scores happen
            sc.append((0.0 if p < 0 else sc[p]) - rng.choice([0.0, 0.5, 1.0, rng.random()]))
        total = rng.randint(1, len(deps))
        host = rerank_tree(toks, par, sc, deps, total)
        t, p, s_, d = rerank_device(torch.tensor(toks), torch.tensor(par), torch.tensor(sc, dtype=torch.float64),
                                    torch.tensor(deps), total)
        assert (t.tolist(), p.tolist(), s_.tolist()) == (list(host.tokens), list(host.parents), list(host.scores))
        v_tok, v_par = host.with_root(7)
        mask, v_dep = tree_mask_and_depth(v_par)
        tok2, par2, dep2, mask2 = verify_tree_inputs(7, t, p, d, depth)
        assert (tok2.tolist(), par2.tolist(), dep2.tolist()) == (v_tok, v_par, v_dep)
        assert torch.equal(mask2, mask)


def _tree_runs(make_target, target, req, budget: int):
    """The same tree-sparrow decode with device rounds on and off: results and verify_tree_device calls."""
    return device_round_runs(
        lambda on: TreeSpeculativeDecoder(make_target(), FastTreeSparrowDrafter(aligned_sparrow(target), max_len=512),
                                          total_tokens=12, depth=4, top_k=4, method="tree-sparrow",
                                          device_rounds=on), req, budget, "verify_tree_device")


@pytest.mark.parametrize("name", FAMILIES)
def test_device_tree_rounds_equal_host_tree_rounds(tiny, clip, name):
    """Growth, rerank and the verify tree built on the device, one sync per round: the same rounds and
    tokens as the host-driven tree rounds, token-identical to AR, and the device path is the one taken."""
    target = tiny(name)
    req = Request("What happens in this video?", clip)
    ar = SpeculativeDecoder(target).generate(req, max_new_tokens=32)
    (on, off), (calls_on, calls_off) = _tree_runs(lambda: FastTarget(target, max_len=512), target, req, 32)
    assert_same_rounds(on, off, ar)
    assert sum(s.accepted for s in on.steps) > 0
    assert calls_on == sum(1 for s in on.steps if s.drafted > 0) > 0 and calls_off == 0


@pytest.mark.parametrize("name", FAMILIES)
def test_emulated_graph_device_tree_rounds_replay_the_post_graphs(tiny, clip, name):
    """On the (emulated) graph path a device round reranks and builds the verify tree, root included, in
    a post graph per (depth, top_k, total), captured once (at warm-up) and replayed every round: the
    same rounds and tokens as the host-driven rounds and AR."""
    target = tiny(name)
    req = Request("What happens in this video?", clip)
    ar = SpeculativeDecoder(target).generate(req, max_new_tokens=32)
    drafters = []

    def make(on):
        drafters.append(EmulatedGraphTree(aligned_sparrow(target), max_len=512, bucket=64))
        return TreeSpeculativeDecoder(FastTarget(target, max_len=512), drafters[-1], total_tokens=12, depth=4,
                                      top_k=4, method="tree-sparrow", device_rounds=on)

    (on, off), (calls_on, calls_off) = device_round_runs(make, req, 32, "verify_tree_device")
    assert_same_rounds(on, off, ar)
    assert calls_on == sum(1 for s in on.steps if s.drafted > 0) > 0 and calls_off == 0
    dev, host = drafters[0], drafters[1]
    assert dev.graphs and not host._post_graphs
    replays = sum(g[0].replays for g in dev._post_graphs.values())
    assert replays == calls_on and all(k[1:] == (4, 12) for k in dev._post_graphs)
    # Warm-up captures the post graph of every depth up to the tree's (shallower trees near the budget).
    assert dev.warmup(FastTarget(target, max_len=512), depth=4, top_k=4, total=12) > 0
    assert {k for k in dev._post_graphs} == {(d, 4, 12) for d in range(1, 5)}


def test_device_tree_carries_its_root_and_a_wrong_root_is_refused(tiny, clip):
    """propose_tree_device builds the verify tree with the pending x_last as its root; the target
    checks it against the round's x_last after the sync (a drafter out of step would verify the wrong tree)."""
    target = tiny("tiny-llava-ov")
    fast = FastTarget(target, max_len=512)
    drafter = FastTreeSparrowDrafter(aligned_sparrow(target), max_len=512)
    state, first = begin_drafter(fast, drafter, Request("Describe the video.", clip))
    dtree = drafter.propose_tree_device(3, 3, 8)
    assert dtree.verify is not None and int(dtree.verify[0][0]) == first
    before = state.length
    with pytest.raises(RuntimeError, match="root"):
        fast.verify_tree_device(state, first + 1, dtree, NEED)
    assert state.length == before and fast.lm.cache.tree is None  # nothing of the refused tree stays
    drafter2 = FastTreeSparrowDrafter(aligned_sparrow(target), max_len=512)
    state, first = begin_drafter(fast, drafter2, Request("Describe the video.", clip))
    out, (tokens, parents, scores, argmax) = fast.verify_tree_device(state, first, drafter2.propose_tree_device(3, 3, 8),
                                                                      NEED)
    assert tokens[0] == first and parents[0] == -1 and len(tokens) == 9


def test_draft_vocabulary_trees_hold_only_its_tokens(tiny, clip, drafts):
    name = "tiny-llava-ov"
    target = tiny(name)
    fast = FastTreeSparrowDrafter(drafts(name), head_ids=HEAD_IDS, max_len=512)
    begin_drafter(target, fast, Request("Describe the video.", clip))
    assert set(fast.propose_tree(depth=3, top_k=3, total=10).tokens) <= set(HEAD_IDS)


def test_bad_shapes_and_a_full_cache_are_refused(tiny, clip, drafts):
    name = "tiny-qwen2.5-vl"
    target = tiny(name)
    req = Request("Describe the video.", clip)
    fast = FastTreeSparrowDrafter(drafts(name), head_ids=[1, 2, 3], max_len=512)
    with pytest.raises(RuntimeError, match="begin"):
        fast.propose_tree(2, 2, 4)
    begin_drafter(target, fast, req)
    with pytest.raises(ValueError, match="top_k"):
        fast.propose_tree(2, 4, 4)  # a draft vocabulary of 3 tokens
    assert fast.propose_tree(0, 2, 4) == fast.propose_tree(0, 2, 4)
    tight = FastTreeSparrowDrafter(drafts(name), max_len=64)
    begin_drafter(target, tight, req)
    with pytest.raises(ValueError, match="max_len"):
        tight.propose_tree(depth=8, top_k=8, total=48)


@pytest.mark.parametrize("engine", ["eager", "fast"])
def test_build_decoder_picks_the_fast_tree_drafter_on_the_fast_engine(tiny, clip, drafts, engine):
    from vidspec.decoding.methods import build_decoder

    name = "tiny-qwen2.5-vl"
    target = tiny(name)
    dec = build_decoder("tree-sparrow", target=target, draft=drafts(name), engine=engine,
                        fast_options={"max_len": 512}, tree={"total_tokens": 10, "depth": 3, "top_k": 3})
    assert isinstance(dec.drafter, FastTreeSparrowDrafter) == (engine == "fast")
    assert isinstance(dec.drafter, TreeSparrowDrafter)
    req = Request("Describe the video.", clip)
    assert dec.generate(req, max_new_tokens=16).token_ids == SpeculativeDecoder(target).generate(
        req, max_new_tokens=16).token_ids


# ---- CUDA ---------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("kernels", [False, True], ids=["sdpa", "kernels"])
def test_cuda_graph_rounds_equal_the_eager_drafter_fp32(cuda_tiny_fp32, clip, name, kernels):
    """Real CUDA graphs in fp32: the pending step and the tree levels on SDPA, or both on the Triton
    kernels (levels: tree-masked decode attention over exact lengths, no buckets)."""
    from vidspec.decoding.fast.lm import _has_triton

    if kernels and not _has_triton():
        pytest.skip("needs Triton")
    target = cuda_tiny_fp32(name)
    model = aligned_sparrow(target)
    # The same device-side growth run eagerly and replayed as graphs: the same kernels, so the same trees.
    eager = FastTreeSparrowDrafter(model, graphs=False, kernels=kernels, compile=False)
    graphed = FastTreeSparrowDrafter(model, bucket=64, kernels=kernels, compile=False)
    shapes = [(4, 4, 12)] * 5 + [(3, 4, 8)]
    lockstep_trees(target, Request("Describe the video.", clip), [eager, graphed], shapes)
    assert graphed.graphs and not eager.graphs and graphed.kernels == kernels and graphed.graph_captures >= 2
    assert (graphed.kernel_levels > 0 and eager.kernel_levels > 0) == kernels
    assert all((lb == 0) == kernels for *_, lb in graphed._graphs)  # the kernel path has no buckets
    fast = FastTarget(target, compile=False)
    req = Request("What happens in this video?", clip)
    ar = SpeculativeDecoder(fast).generate(req, max_new_tokens=32)
    dec = TreeSpeculativeDecoder(fast, graphed, total_tokens=12, depth=4, top_k=4, method="tree-sparrow")
    assert dec.generate(req, max_new_tokens=32).token_ids == ar.token_ids
    assert graphed.warmup(fast, depth=4, top_k=4) >= 0  # captures the remaining round graphs of this shape


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", FAMILIES)
def test_cuda_compiled_kernel_levels_stay_lossless(cuda_tiny_fp32, clip, name):
    """The default on CUDA: kernel levels with the torch.compile'd pieces, in graphs, fused by Inductor
    (so float noise may reorder near-ties in a tree). Whatever tree it grows, strict tree decoding
    must still emit exactly the target's greedy tokens, on the target's compiled fast path too."""
    from vidspec.decoding.fast.lm import _has_triton

    if not _has_triton():
        pytest.skip("needs Triton")
    target = cuda_tiny_fp32(name)
    drafter = FastTreeSparrowDrafter(aligned_sparrow(target), bucket=64, kernels=True, compile=True)
    fast = FastTarget(target)
    req = Request("What happens in this video?", clip)
    ar = SpeculativeDecoder(fast).generate(req, max_new_tokens=32)
    dec = TreeSpeculativeDecoder(fast, drafter, total_tokens=12, depth=4, top_k=4, method="tree-sparrow")
    assert dec.generate(req, max_new_tokens=32).token_ids == ar.token_ids
    assert drafter.kernels and drafter.kernel_levels > 0 and drafter.graph_captures >= 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", FAMILIES)
def test_cuda_device_tree_rounds_equal_host_tree_rounds(cuda_tiny_fp32, clip, name):
    """On CUDA (round graphs, device rerank, device verify mask): the host-driven tree rounds, losslessly."""
    target = cuda_tiny_fp32(name)
    req = Request("What happens in this video?", clip)
    ar = SpeculativeDecoder(FastTarget(target)).generate(req, max_new_tokens=32)
    (on, off), (calls_on, _) = _tree_runs(lambda: FastTarget(target), target, req, 32)
    assert_same_rounds(on, off, ar)
    assert calls_on > 0


# ---- the kernel path on CPU, through Triton's interpreter (opt-in; CI has no Triton) -------------------------
RUN_KERNELS_ON_CPU = os.environ.get("TRITON_INTERPRET") == "1" and importlib.util.find_spec("triton") is not None


@pytest.mark.skipif(not RUN_KERNELS_ON_CPU, reason="needs Triton with TRITON_INTERPRET=1 (on CUDA: the gpu test)")
@pytest.mark.parametrize(("name", "head_ids"), [("tiny-qwen2.5-vl", None), ("tiny-llava-ov", None),
                                                ("tiny-qwen2.5-vl", HEAD_IDS)], ids=["qwen-full", "llava-full",
                                                                                     "qwen-vocab"])
def test_kernel_path_trees_equal_the_eager_drafter_in_the_interpreter(tiny, clip, drafts, name, head_ids):
    """With kernels=True the pending step and every tree level run the Triton RoPE/KV-write and
    attention kernels (the levels with the ancestor matrix as the kernel's tree mask): every round's
    tree still equals the eager drafter's, directly and through the emulated graph path (whose round
    graphs have no buckets), also with a draft vocabulary."""
    target = tiny(name)
    model = copy.deepcopy(drafts(name))  # fusing re-points the layer's weights: keep the shared one
    eager = TreeSparrowDrafter(model, head_ids=head_ids)
    fast = FastTreeSparrowDrafter(model, head_ids=head_ids, kernels=True, compile=False, max_len=256)
    graphed = EmulatedGraphTree(model, head_ids=head_ids, kernels=True, compile=False, max_len=256, max_step=3)
    shapes = [(4, 4, 12), (3, 3, 10), (4, 4, 12), (1, 3, 3), (2, 4, 6)]
    levels = sum(d - 1 for d, _, _ in shapes)
    assert lockstep_trees(target, Request("Describe the video.", clip), [eager, fast, graphed], shapes) > 0
    assert fast.chain.kernels and graphed.chain.kernels and graphed.graph_captures > 0  # known after begin
    assert fast.kernel_levels == levels  # every level of every round took the kernel path
    assert graphed.kernel_levels >= levels and all(lb == 0 for *_, lb in graphed._graphs)
    if name == "tiny-llava-ov":  # (once: slow in the interpreter) no buckets: a graph per (T, depth, top_k)
        graphed.warmup(target, depth=2, top_k=4)
        assert {(t, d, 4, 0) for t in (1, 2, 3) for d in (1, 2)} <= set(graphed._graphs)
