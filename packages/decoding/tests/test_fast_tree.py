"""Tree drafting: masks and positions, tree verification against chains, lossless tree decoding."""

from __future__ import annotations

import pytest
import torch

from vidspec.decoding.fast import FastTarget, TreeModelDrafter
from vidspec.decoding.loops.chain import SpeculativeDecoder
from vidspec.decoding.loops.tree import TreeSpeculativeDecoder
from vidspec.decoding.trees import DraftTree, best_path, tree_mask_and_depth
from vidspec.decoding.types import Request

#        0
#      /   \
#     1     2
#    / \     \
#   3   4     5
#   |
#   6
TOKENS = [5, 10, 11, 12, 13, 14, 15]
PARENTS = [-1, 0, 0, 1, 1, 2, 3]


def path_to(i: int) -> list[int]:
    out = []
    while i >= 0:
        out.append(i)
        i = PARENTS[i]
    return out[::-1]


def test_tree_mask_and_depth():
    mask, depth = tree_mask_and_depth(PARENTS)
    assert depth == [0, 1, 1, 2, 2, 2, 3]
    for i in range(len(PARENTS)):
        assert torch.nonzero(mask[i]).flatten().tolist() == sorted(path_to(i))
    with pytest.raises(ValueError):
        tree_mask_and_depth([-1, 2, 0])


def test_best_path_follows_matches_then_draft_scores():
    scores = [0.0, -0.1, -0.5, -0.3, -0.2, -0.9, -0.4]
    # the target agrees with 10 at the root, then wants 99 (no child): strict path [0, 1], continue by score
    argmax = [10, 99, 0, 0, 0, 0, 0]
    path, matched = best_path(TOKENS, PARENTS, scores, argmax)
    assert matched == 1 and path == [0, 1, 4]
    # full agreement along 0-1-3-6
    argmax = [10, 12, 0, 15, 0, 0, 7]
    assert best_path(TOKENS, PARENTS, scores, argmax) == ([0, 1, 3, 6], 3)


@pytest.mark.parametrize("name", ["tiny-qwen2.5-vl", "tiny-llava-ov"])
@pytest.mark.parametrize("fast", [True, False])
def test_tree_rows_equal_chains_and_commit(tiny, clip, name, fast):
    """Each node's row equals the last row of a chain over its root-to-node path (masks + positions),
    and after keeping a path the cache continues as if the chain had been verified."""
    eager = tiny(name)
    target = FastTarget(eager, max_len=512) if fast else eager
    req = Request("Describe the video.", clip)
    s = target.prefill(req)
    base = s.length
    out = target.verify_tree(s, TOKENS, PARENTS, frozenset({"mid"}))
    assert out.logits.shape[0] == len(TOKENS) and s.length == base + len(TOKENS)
    for i in range(len(TOKENS)):
        ref = eager.prefill(req)
        want = eager.verify(ref, [TOKENS[p] for p in path_to(i)], frozenset({"mid"}))
        assert (want.logits[-1] - out.logits[i]).abs().max() < 1e-4
        assert (want.hidden_mid[-1] - out.hidden_mid[i]).abs().max() < 1e-4
    target.commit_tree(s, [0, 1, 4])
    assert s.length == base + 3
    nxt = target.verify(s, [7])
    ref = eager.prefill(req)
    assert (eager.verify(ref, [5, 10, 13, 7]).logits[-1] - nxt.logits[0]).abs().max() < 1e-4


def test_tree_sessions_grow_level_by_level(tiny, clip):
    """Two verify_tree calls in one session equal one call with the whole tree."""
    eager = tiny("tiny-qwen2.5-vl")
    a, b = FastTarget(eager, max_len=512), FastTarget(eager, max_len=512)
    req = Request("Describe the video.", clip)
    sa, sb = a.prefill(req), b.prefill(req)
    whole = a.verify_tree(sa, TOKENS, PARENTS)
    first = b.verify_tree(sb, TOKENS[:3], PARENTS[:3])
    second = b.verify_tree(sb, TOKENS[3:], PARENTS[3:])
    assert (torch.cat([first.logits, second.logits]) - whole.logits).abs().max() < 1e-4
    b.rollback(sb, sb.length - len(TOKENS))
    assert sb.cache.tree is None


def test_draft_tree_shape(tiny, clip, perturbed):
    target = tiny("tiny-llava-ov")
    drafter = TreeModelDrafter(perturbed("tiny-llava-ov"))
    s = target.prefill(Request("Describe the video.", clip))
    drafter.begin(target, s, int(s.first_logits.argmax()))
    tree: DraftTree = drafter.propose_tree(depth=3, top_k=3, total=8)
    assert len(tree) == 8
    assert all(p < i for i, p in enumerate(tree.parents))
    # ancestor-closed, scores never grow along a path, siblings distinct
    for i, p in enumerate(tree.parents):
        if p >= 0:
            assert tree.scores[i] <= tree.scores[p] + 1e-6
    sib = {}
    for i, p in enumerate(tree.parents):
        assert (p, tree.tokens[i]) not in sib
        sib[(p, tree.tokens[i])] = i
    # the draft's cache was rolled back to the committed sequence
    assert drafter._state.cache.tree is None


@pytest.mark.parametrize("name", ["tiny-qwen2.5-vl", "tiny-llava-ov"])
def test_tree_decoding_is_lossless(tiny, clip, perturbed, name):
    target = tiny(name)
    req = Request("What happens in this video?", clip)
    ar = SpeculativeDecoder(FastTarget(target, max_len=512)).generate(req, max_new_tokens=24)  # == eager AR (test_fast)
    dec = TreeSpeculativeDecoder(FastTarget(target, max_len=512), TreeModelDrafter(perturbed(name)),
                                 total_tokens=10, depth=3, top_k=3)
    res = dec.generate(req, max_new_tokens=24)
    assert res.token_ids == ar.token_ids
    assert res.tau > 1.0 and all(s.drafted <= 10 for s in res.steps)


def test_tree_decoding_with_eager_target(tiny, clip, perturbed):
    name = "tiny-qwen2.5-vl"
    target = tiny(name)
    req = Request("Describe the video.", clip)
    ar = SpeculativeDecoder(target).generate(req, max_new_tokens=16)
    res = TreeSpeculativeDecoder(target, TreeModelDrafter(perturbed(name)), total_tokens=6, depth=2,
                                 top_k=3).generate(req, max_new_tokens=16)
    assert res.token_ids == ar.token_ids


def test_loose_verifier_on_tree_best_path(tiny, clip, perturbed):
    """LVSpec with λ = 0 on a tree is lossless; λ = 1 (every position loose) accepts at least as much."""
    from vidspec.decoding.verifiers.factory import build_verifier

    name = "tiny-qwen2.5-vl"
    target = tiny(name)
    req = Request("Describe the video.", clip)
    ar = SpeculativeDecoder(target).generate(req, max_new_tokens=16)
    runs = {}
    for lam in (0.0, 1.0):
        verifier = build_verifier("lvspec", tokenizer=target.tokenizer, lam=lam)
        dec = TreeSpeculativeDecoder(FastTarget(target, max_len=512), TreeModelDrafter(perturbed(name)), verifier,
                                     total_tokens=6, depth=2, top_k=3, method="tree-lvspec")
        runs[lam] = dec.generate(req, max_new_tokens=16)
    assert runs[0.0].token_ids == ar.token_ids
    assert runs[1.0].tau >= runs[0.0].tau
