"""The tree loop adapts per request like the chain loop: a tree that is never accepted stops drafting, a dip in
acceptance only shrinks the depth for a while; the output stays AR's."""

from __future__ import annotations

import pytest

from vidspec.decoding.fixtures import make_moving_square_frames
from vidspec.decoding.loops.chain import AdaptiveDraftPolicy, SpeculativeDecoder
from vidspec.decoding.loops.tree import TreeSpeculativeDecoder
from vidspec.decoding.models import load_target
from vidspec.decoding.trees import DraftTree
from vidspec.decoding.types import Request, VideoClip

N = 40


class OracleTreeDrafter:
    """Grows a one-path tree of the target's own continuation (known from an AR decode), except at the absolute
    token positions where ``wrong_at`` says so (a wrong token there, and the path ends)."""

    name = "oracle-tree"
    need: frozenset[str] = frozenset()

    def __init__(self, script: list[int], vocab: int, wrong_at):
        self.script, self.vocab, self.wrong_at = script, vocab, wrong_at
        self.trees = 0
        self.commits = 0

    def begin(self, target, state, first_token: int) -> None:
        self.pos = 1  # tokens of the request so far

    def propose_tree(self, depth: int, top_k: int, total: int) -> DraftTree:
        self.trees += 1
        tokens = []
        for i in range(self.pos, self.pos + depth):
            true = self.script[i] if i < len(self.script) else self.script[-1]
            tokens.append((true + 1) % self.vocab if self.wrong_at(i) else true)
        return DraftTree(tuple(tokens), tuple(range(-1, depth - 1)), tuple(-0.1 * (j + 1) for j in range(depth)))

    def commit(self, accepted: list[int], next_token: int, out=None) -> None:
        self.commits += 1
        self.pos += len(accepted) + 1


@pytest.fixture(scope="module")
def setup():
    target = load_target("tiny-qwen2.5-vl")
    req = Request("Describe the video.", VideoClip(frames=make_moving_square_frames(4, 56, 56), fps=2.0, source="mem"))
    ar = SpeculativeDecoder(target).generate(req, max_new_tokens=N)
    assert ar.num_new_tokens == N  # the request runs to its budget
    return target, req, list(ar.token_ids)


def tree_decoder(target, drafter, adaptive=True):
    return TreeSpeculativeDecoder(target, drafter, total_tokens=6, depth=4, top_k=2, method="tree-test",
                                  adaptive=AdaptiveDraftPolicy(draft_cost=0.15) if adaptive else None)


def test_never_accepted_tree_stops_drafting(setup):
    target, req, ar = setup
    drafter = OracleTreeDrafter(ar, target.vocab_size, lambda i: True)
    dec = tree_decoder(target, drafter)
    res = dec.generate(req, max_new_tokens=N)
    assert list(res.token_ids) == ar
    rec = dec.last_adaptation
    assert [k for _, k in rec["k_history"]] == [4, 2, 1, 0] and rec["drafting_stopped_at"] is not None
    drafted = [s.drafted for s in res.steps]
    # after the stop: plain decoding, the drafter neither asked for trees nor told of tokens
    assert drafter.trees == drafter.commits == sum(d > 0 for d in drafted) == 6
    assert set(drafted[drafter.trees:]) == {0} and len(res.steps) == drafter.trees + (N - 1 - drafter.trees)
    # without the policy the same drafter drafts every round
    plain = tree_decoder(target, OracleTreeDrafter(ar, target.vocab_size, lambda i: True), adaptive=False)
    res_plain = plain.generate(req, max_new_tokens=N)
    assert plain.last_adaptation is None and all(s.drafted > 0 for s in res_plain.steps[:-1])


def test_tree_dip_then_recovery_gets_depth_back(setup):
    target, req, ar = setup
    dec = tree_decoder(target, OracleTreeDrafter(ar, target.vocab_size, lambda i: 6 <= i < 12))
    res = dec.generate(req, max_new_tokens=N)
    assert list(res.token_ids) == ar
    rec = dec.last_adaptation
    ks = [k for _, k in rec["k_history"]]
    assert ks[0] == 4 and 0 < min(ks) < 4 and ks[-1] == 4 and rec["drafting_stopped_at"] is None


def test_accepted_tree_keeps_depth(setup):
    target, req, ar = setup
    dec = tree_decoder(target, OracleTreeDrafter(ar, target.vocab_size, lambda i: False))
    res = dec.generate(req, max_new_tokens=N)
    assert list(res.token_ids) == ar and dec.last_adaptation["k_history"] == [[0, 4]]
    assert res.tau > 4
