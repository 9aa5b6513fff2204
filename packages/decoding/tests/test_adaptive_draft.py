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
    # K 4 -> 2 -> 1 -> 0 (one round at each K after the first two): drafting stops after 4 drafting rounds
    assert [k for _, k in rec["k_history"]] == [4, 2, 1, 0]
    assert rec["drafting_stopped_at"] == 5
    drafted = [s.drafted for s in res.steps]
    assert drafted[:4] == [4, 4, 2, 1] and set(drafted[4:]) == {0}
    assert len(drafter.proposals) == 4  # the drafter is not called once drafting stopped
    # the work beyond plain decoding: 11 draft tokens over a 60-token request
    assert sum(drafted) == 11


def test_accepted_draft_keeps_k():
    dec = SpeculativeDecoder(target(), oracle_drafter(SCRIPT), k=4, adaptive=AdaptiveDraftPolicy(draft_cost=0.1))
    res = dec.generate(REQ, max_new_tokens=len(SCRIPT))
    assert list(res.token_ids) == SCRIPT
    assert dec.last_adaptation["k_history"] == [[0, 4]]
    assert dec.last_adaptation["drafting_stopped_at"] is None
    assert all(s.drafted == 4 for s in res.steps[:-1])


def test_k_grows_back_when_acceptance_returns():
    # wrong drafts for the first positions, then right ones
    dec = SpeculativeDecoder(target(), oracle_drafter(SCRIPT, wrong_at=lambda i: i < 3), k=4,
                             adaptive=AdaptiveDraftPolicy(draft_cost=0.05))
    res = dec.generate(REQ, max_new_tokens=len(SCRIPT))
    assert list(res.token_ids) == SCRIPT
    ks = [k for _, k in dec.last_adaptation["k_history"]]
    assert ks[0] == 4 and min(ks) < 4 and ks[-1] == 4


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
