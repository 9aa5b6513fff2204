"""Tree drafting with a Sparrow draft: lossless, a top-1 tree is the chain, commit leaves the chain's state."""

from __future__ import annotations

import pytest
import torch

from vidspec.decoding.drafters.sparrow import SparrowDrafter
from vidspec.decoding.drafters.sparrow_tree import TreeSparrowDrafter
from vidspec.decoding.fast import FastTarget
from vidspec.decoding.loops.chain import SpeculativeDecoder
from vidspec.decoding.loops.tree import TreeSpeculativeDecoder
from vidspec.decoding.testing import begin_drafter
from vidspec.decoding.types import Request, VerifyOutput

FAMILIES = ["tiny-qwen2.5-vl", "tiny-llava-ov"]
HEAD_IDS = list(range(0, 512, 2))  # a draft vocabulary of every other token id





@pytest.mark.parametrize("name", FAMILIES)
def test_tree_sparrow_is_token_identical_to_ar(tiny, clip, drafts, name):
    target = tiny(name)
    req = Request("Describe the video.", clip)
    ar = SpeculativeDecoder(target).generate(req, max_new_tokens=32)
    chain = SpeculativeDecoder(target, SparrowDrafter(drafts(name)), k=4, method="sparrow").generate(req, max_new_tokens=32)
    dec = TreeSpeculativeDecoder(target, TreeSparrowDrafter(drafts(name)), total_tokens=12, depth=4, top_k=4)
    res = dec.generate(req, max_new_tokens=32)
    assert res.token_ids == ar.token_ids
    assert all(s.drafted <= 12 for s in res.steps)
    # the draft agrees with the target, so paths are accepted and the tree beats the chain
    assert sum(s.accepted for s in res.steps) > 0 and res.tau >= chain.tau > 1.0


@pytest.mark.parametrize("name", FAMILIES)
def test_tree_sparrow_on_fast_target_with_draft_vocabulary(tiny, clip, drafts, name):
    target = tiny(name)
    req = Request("What happens in this video?", clip)
    ar = SpeculativeDecoder(target).generate(req, max_new_tokens=24)
    drafter = TreeSparrowDrafter(drafts(name), head_ids=HEAD_IDS)
    res = TreeSpeculativeDecoder(FastTarget(target, max_len=512), drafter, total_tokens=10, depth=3,
                             top_k=3).generate(req, max_new_tokens=24)
    assert res.token_ids == ar.token_ids
    begin_drafter(target, drafter, req)
    tree = drafter.propose_tree(depth=3, top_k=3, total=10)
    assert set(tree.tokens) <= set(HEAD_IDS)


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("head_ids", [None, HEAD_IDS], ids=["full", "vocab"])
def test_top1_tree_is_the_chain(tiny, clip, drafts, name, head_ids):
    target = tiny(name)
    req = Request("Describe the video.", clip)
    chain = SparrowDrafter(drafts(name), head_ids=head_ids)
    tree = TreeSparrowDrafter(drafts(name), head_ids=head_ids)
    begin_drafter(target, chain, req)
    begin_drafter(target, tree, req)
    base = tree.cache_length
    want = chain.propose(5).tokens
    got = tree.propose_tree(depth=5, top_k=1, total=5)
    assert got.tokens == want
    assert got.parents == (-1, 0, 1, 2, 3)
    assert all(a >= b for a, b in zip(got.scores, got.scores[1:]))
    # only x_last stays in the cache; the tree's own entries are dropped
    assert tree.cache_length == base + 1


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("head_ids", [None, HEAD_IDS], ids=["full", "vocab"])
def test_commit_leaves_the_chain_drafters_state(tiny, clip, drafts, name, head_ids):
    """Accept the chain's first two tokens out of a wider tree: the tree drafter's cache, pending
    inputs and next proposals equal the chain drafter's after the same tokens and target states."""
    target = tiny(name)
    req = Request("Describe the video.", clip)
    chain = SparrowDrafter(drafts(name), head_ids=head_ids)
    tree = TreeSparrowDrafter(drafts(name), head_ids=head_ids)
    begin_drafter(target, chain, req)
    state, first = begin_drafter(target, tree, req)
    d = chain.propose(4).tokens
    t = tree.propose_tree(depth=3, top_k=3, total=100)  # total above the node count: every node kept
    a = t.tokens.index(d[0])
    assert t.parents[a] == -1
    b = next(i for i, (tok, p) in enumerate(zip(t.tokens, t.parents)) if tok == d[1] and p == a)
    tokens, parents = t.with_root(first)
    out = target.verify_tree(state, tokens, parents, frozenset({"penult"}))
    path = torch.tensor([0, a + 1, b + 1])
    rows = out.hidden_penult[path]
    nxt = int(out.logits[b + 1].argmax())
    tree.commit([d[0], d[1]], nxt, VerifyOutput(logits=out.logits[path], hidden_penult=rows))
    chain.commit(2, nxt, VerifyOutput(logits=out.logits[path], hidden_penult=rows))
    c, p = chain._pending, tree.chain._pending
    assert c.tokens == p.tokens and c.index == p.index
    assert all(torch.equal(x, y) for x, y in zip(c.hidden, p.hidden))
    assert chain.cache_length == tree.cache_length and chain._cache_index == tree.chain._cache_index
    for lc, lt in zip(chain.cache.layers, tree.chain.cache.layers):
        assert torch.equal(lc.keys, lt.keys) and torch.equal(lc.values, lt.values)
    assert tree.propose_tree(depth=4, top_k=1, total=4).tokens == chain.propose(4).tokens


def test_commit_without_target_states_is_refused(tiny, clip, drafts):
    """A caller that does not pass the path's target rows gets a clear error, not a silent drift."""
    name = "tiny-llava-ov"
    target = tiny(name)
    tree = TreeSparrowDrafter(drafts(name))
    begin_drafter(target, tree, Request("Describe the video.", clip))
    t = tree.propose_tree(depth=2, top_k=3, total=6)
    with pytest.raises(RuntimeError, match="penultimate states"):
        tree.commit([t.tokens[0]], 0)


def test_loose_verifier_on_a_sparrow_tree(tiny, clip, drafts):
    """The decoder asks the target for the drafter's needs beside the verifier's; LVSpec at λ = 0 stays lossless."""
    from vidspec.decoding.verifiers.factory import build_verifier

    name = "tiny-qwen2.5-vl"
    target = tiny(name)
    req = Request("Describe the video.", clip)
    ar = SpeculativeDecoder(target).generate(req, max_new_tokens=16)
    verifier = build_verifier("lvspec", tokenizer=target.tokenizer, lam=0.0)
    dec = TreeSpeculativeDecoder(target, TreeSparrowDrafter(drafts(name)), verifier, total_tokens=8, depth=3, top_k=3)
    assert dec.verifier is verifier
    assert dec.generate(req, max_new_tokens=16).token_ids == ar.token_ids
