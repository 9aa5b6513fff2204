"""The adaptive draft policy: K shrinks, and drafting stops, when acceptance does not pay; output stays AR's."""

from __future__ import annotations

import pytest

from vidspec.decoding.drafters import NoDrafter
from vidspec.decoding.loops.chain import AdaptiveDraftPolicy, SpeculativeDecoder
from vidspec.decoding.testing import ScriptedTarget, oracle_drafter, sequence_logits
from vidspec.decoding.types import Request

SCRIPT = [3, 1, 4, 1, 5, 2, 6, 5, 3, 5, 0, 7, 2, 1, 4, 6, 2, 6, 4, 3] * 3
V = 8
REQ = Request("p")


def target():
    return ScriptedTarget(sequence_logits(SCRIPT, V), vocab=V)


def test_never_accepted_draft_stops_and_stays_token_identical():
    ar = SpeculativeDecoder(target(), NoDrafter()).generate(REQ, max_new_tokens=len(SCRIPT))
    drafter = oracle_drafter(SCRIPT, wrong_at=lambda i: True)
    dec = SpeculativeDecoder(target(), drafter, k=4, adaptive=AdaptiveDraftPolicy(draft_cost=0.1))
    res = dec.generate(REQ, max_new_tokens=len(SCRIPT))
    assert res.token_ids == ar.token_ids
    rec = dec.last_adaptation
    # K 4 -> 2 -> 1 -> 0: the prior (p 0.8) holds K for the first rounds, then it halves to a stop
    assert [k for _, k in rec["k_history"]] == [4, 2, 1, 0]
    drafted = [s.drafted for s in res.steps]
    n = len(drafter.proposals)  # the drafter is not called once drafting stopped
    assert set(drafted[n:]) == {0} and 0 not in drafted[:n]
    assert drafted[:n] == sorted(drafted[:n], reverse=True)
    assert rec["drafting_stopped_at"] == n + 1 and rec["accept_rate"] < 0.1
    # the work beyond plain decoding: 22 draft tokens (8 rounds) over a 60-token request
    assert (n, sum(drafted)) == (8, 22)


def test_never_accepted_draft_cost_is_bounded_for_every_cost():
    # the guarantee: drafting stops within a few rounds whatever c (here K 4, c 0.05 .. 0.3)
    for c in (0.05, 0.1, 0.15, 0.3):
        policy = AdaptiveDraftPolicy(draft_cost=c)
        policy.start(4)
        k, drafted, rounds = 4, 0, 0
        while k > 0:
            drafted, rounds = drafted + k, rounds + 1
            k = policy.update(k, 0, rounds + 1, None, 1.0)
            assert rounds <= 12
        assert drafted * c <= 3.5  # at most ~3.5 verify steps' worth of draft work in the whole request


def test_dip_then_recovery_gets_k_back():
    # right drafts, then wrong ones for eight positions (rounds of no acceptance), then right ones again:
    # K shrinks during the dip and grows back to K once the drafts are accepted, without stopping
    drafter = oracle_drafter(SCRIPT, wrong_at=lambda i: 8 <= i < 16)
    dec = SpeculativeDecoder(target(), drafter, k=4, adaptive=AdaptiveDraftPolicy(draft_cost=0.1))
    res = dec.generate(REQ, max_new_tokens=len(SCRIPT))
    assert list(res.token_ids) == SCRIPT
    rec = dec.last_adaptation
    ks = [k for _, k in rec["k_history"]]
    assert ks[0] == 4 and 0 < min(ks) < 4 and ks[-1] == 4
    assert rec["drafting_stopped_at"] is None
    assert all(s.drafted == 4 for s in res.steps[-4:-1])  # the last full rounds draft K again


def test_shrunk_k_grows_when_rounds_accept_everything():
    # at K 1 every round accepted: p rises although a round can accept at most one draft
    policy = AdaptiveDraftPolicy(draft_cost=0.15)
    policy.start(4)
    k = 4
    for i in range(6):
        k = policy.update(k, 0, i + 2, None, 1.0)
        if k == 1:
            break
    assert k == 1
    for i in range(10):
        k = policy.update(k, k, 20 + i, None, 1.0)
    assert k == 4


def test_accepted_draft_keeps_k():
    dec = SpeculativeDecoder(target(), oracle_drafter(SCRIPT), k=4, adaptive=AdaptiveDraftPolicy(draft_cost=0.1))
    res = dec.generate(REQ, max_new_tokens=len(SCRIPT))
    assert list(res.token_ids) == SCRIPT
    assert dec.last_adaptation["k_history"] == [[0, 4]]
    assert dec.last_adaptation["drafting_stopped_at"] is None
    assert all(s.drafted == 4 for s in res.steps[:-1])


def test_hard_opening_keeps_k():
    # the first two rounds rejected (a hard opening), then right drafts: the prior keeps K at 4
    dec = SpeculativeDecoder(target(), oracle_drafter(SCRIPT, wrong_at=lambda i: i < 3), k=4,
                             adaptive=AdaptiveDraftPolicy(draft_cost=0.15))
    res = dec.generate(REQ, max_new_tokens=len(SCRIPT))
    assert list(res.token_ids) == SCRIPT
    assert [s.accepted for s in res.steps[:2]] == [0, 0]
    assert dec.last_adaptation["k_history"] == [[0, 4]]
    # without the prior, the same two rounds shrink K
    bare = SpeculativeDecoder(target(), oracle_drafter(SCRIPT, wrong_at=lambda i: i < 3), k=4,
                              adaptive=AdaptiveDraftPolicy(draft_cost=0.15, prior_tries=0.0))
    bare.generate(REQ, max_new_tokens=len(SCRIPT))
    assert min(k for _, k in bare.last_adaptation["k_history"]) < 4


def test_policy_resets_per_request():
    policy = AdaptiveDraftPolicy(draft_cost=0.1)
    bad = SpeculativeDecoder(target(), oracle_drafter(SCRIPT, wrong_at=lambda i: True), k=4, adaptive=policy)
    bad.generate(REQ, max_new_tokens=30)
    assert bad.last_adaptation["drafting_stopped_at"] is not None
    res = bad.generate(REQ, max_new_tokens=30)
    assert res.steps[0].drafted == 4  # a new request drafts K again


@pytest.mark.parametrize("cost", [None, 0.3])
def test_measured_or_given_cost(cost):
    dec = SpeculativeDecoder(target(), oracle_drafter(SCRIPT, wrong_at=lambda i: True), k=3,
                             adaptive=AdaptiveDraftPolicy(draft_cost=cost))
    dec.generate(REQ, max_new_tokens=len(SCRIPT))
    rec = dec.last_adaptation
    assert rec["draft_cost"] > 0 and rec["drafting_stopped_at"] is not None
    if cost is not None:
        assert rec["draft_cost"] == cost


def test_no_policy_record_for_ar():
    dec = SpeculativeDecoder(target(), NoDrafter(), adaptive=AdaptiveDraftPolicy())
    dec.generate(REQ, max_new_tokens=5)
    assert dec.last_adaptation is None


def test_tiny_models_sd_stays_token_identical_with_adaptive():
    from vidspec.decoding.fixtures import make_moving_square_frames
    from vidspec.decoding.methods import build_decoder
    from vidspec.decoding.models import load_target
    from vidspec.decoding.types import VideoClip

    t = load_target("tiny-qwen2.5-vl")
    req = Request("Describe the video.", VideoClip(frames=make_moving_square_frames(4, 56, 56), fps=2.0, source="mem"))
    ar = build_decoder("ar", target=t).generate(req, max_new_tokens=40)
    sd = build_decoder("sd", target=t, draft_cost=0.5)
    assert sd.adaptive is not None
    res = sd.generate(req, max_new_tokens=40)
    assert res.token_ids == ar.token_ids
    assert sd.last_adaptation["k_history"][0] == [0, 4]
