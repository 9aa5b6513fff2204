"""Scripted stubs make every acceptance case of the loop exact."""

from __future__ import annotations

import pytest

from vidspec.decoding.drafters import NoDrafter
from vidspec.decoding.loops.chain import SpeculativeDecoder
from vidspec.decoding.testing import ScriptedDrafter, ScriptedTarget, oracle_drafter, sequence_logits
from vidspec.decoding.types import Request

SCRIPT = [3, 1, 4, 1, 5, 2, 6, 5, 3, 5, 0, 7, 2, 1, 4, 6, 2, 6, 4, 3]
V = 8
REQ = Request("p")


def target(eos=None, script=SCRIPT):
    return ScriptedTarget(sequence_logits(script, V, eos), vocab=V, eos=eos)


@pytest.mark.parametrize("k", [1, 2, 4, 7])
def test_always_accept(k):
    t = target()
    res = SpeculativeDecoder(t, oracle_drafter(SCRIPT), k=k).generate(REQ, max_new_tokens=len(SCRIPT))
    assert list(res.token_ids) == SCRIPT
    # first token from prefill, then full rounds of k+1 and a final partial round
    assert [s.emitted for s in res.steps[:-1]] == [k + 1] * (len(res.steps) - 1)
    assert res.steps[-1].emitted == (len(SCRIPT) - 1) - (k + 1) * (len(res.steps) - 1)
    assert all(s.accepted == s.drafted for s in res.steps)
    # each verify pass saw x_last + the drafts
    assert all(len(c) == s.drafted + 1 for c, s in zip(t.calls, res.steps))


@pytest.mark.parametrize("k", [1, 3, 5])
def test_never_accept(k):
    t = target()
    res = SpeculativeDecoder(t, oracle_drafter(SCRIPT, wrong_at=lambda i: True), k=k).generate(
        REQ, max_new_tokens=len(SCRIPT))
    assert list(res.token_ids) == SCRIPT
    assert all(s.accepted == 0 and s.emitted == 1 for s in res.steps)
    assert res.tau == 1.0 and res.target_passes == len(SCRIPT) - 1


def test_partial_accept_exact_counts():
    # drafts are wrong exactly at absolute positions 3 and 9
    t = target()
    wrong = {3, 9}
    res = SpeculativeDecoder(t, oracle_drafter(SCRIPT, wrong_at=lambda i: i in wrong), k=4).generate(
        REQ, max_new_tokens=12)
    assert list(res.token_ids) == SCRIPT[:12]
    # committed: [s0]; round 1 drafts positions 1..4, wrong at 3 -> accepts 2, emits 3 (pos 1,2,3)
    # round 2 drafts 4..7 all right -> 4 accepted + bonus (pos 4..8)
    # round 3: 9 emitted, 3 left, so only 2 drafted (9, 10); wrong at 9 -> emits pos 9
    assert [(s.drafted, s.accepted, s.emitted) for s in res.steps[:3]] == [(4, 2, 3), (4, 4, 5), (2, 0, 1)]
    assert sum(s.emitted for s in res.steps) == 11


def test_eos_stops_and_is_kept():
    script = [2, 3, 4, 1, 6, 6, 6]
    t = target(eos=1, script=script)
    res = SpeculativeDecoder(t, oracle_drafter(script), k=5).generate(REQ, max_new_tokens=50)
    assert list(res.token_ids) == [2, 3, 4, 1]
    assert res.finish_reason == "eos"


def test_eos_as_first_token():
    t = target(eos=3)
    res = SpeculativeDecoder(t, oracle_drafter(SCRIPT), k=3).generate(REQ, max_new_tokens=10)
    assert list(res.token_ids) == [3] and res.steps == () and res.finish_reason == "eos"


@pytest.mark.parametrize("budget", [1, 2, 5, 6, 11])
def test_max_new_tokens_is_exact_and_drafts_shrink(budget):
    t = target()
    d = oracle_drafter(SCRIPT)
    res = SpeculativeDecoder(t, d, k=4).generate(REQ, max_new_tokens=budget)
    assert list(res.token_ids) == SCRIPT[:budget]
    assert res.finish_reason == "length"
    # no round drafted more than the budget could use
    assert all(len(p) <= 4 for p in d.proposals)
    assert sum(len(p) + 1 for p in d.proposals) <= budget - 1 + len(d.proposals)


def test_ar_is_k0():
    t = target()
    res = SpeculativeDecoder(t, NoDrafter(), k=5).generate(REQ, max_new_tokens=8)
    assert list(res.token_ids) == SCRIPT[:8] and all(len(c) == 1 for c in t.calls)


def test_rollback_restores_target_state():
    """After a rejection the target must continue from the accepted prefix, not the drafts."""
    t = target()
    # a drafter that is right once then proposes garbage
    def fn(committed, k):
        true = [SCRIPT[i] if i < len(SCRIPT) else 0 for i in range(len(committed), len(committed) + k)]
        return true[:1] + [(x + 3) % V for x in true[1:]]

    res = SpeculativeDecoder(t, ScriptedDrafter(fn), k=4).generate(REQ, max_new_tokens=15)
    assert list(res.token_ids) == SCRIPT[:15]
    assert all(s.accepted == 1 for s in res.steps[:-1])


def test_acceptance_by_position():
    t = target()
    res = SpeculativeDecoder(t, oracle_drafter(SCRIPT, wrong_at=lambda i: i % 3 == 0), k=3).generate(
        REQ, max_new_tokens=20)
    rates = res.acceptance_by_position()
    assert len(rates) == 3 and rates[0] >= rates[1] >= rates[2]
    assert list(res.token_ids) == SCRIPT[:20]


def test_needs_the_target_cannot_meet_are_refused():
    from vidspec.decoding.errors import ConfigError
    from vidspec.decoding.verifiers.lvspec import LVSpecVerifier
    from vidspec.decoding.verifiers.relevance import AttentionMassScorer

    with pytest.raises(ConfigError, match="attn_to_visual"):
        SpeculativeDecoder(target(), oracle_drafter(SCRIPT), LVSpecVerifier(scorer=AttentionMassScorer()), k=2)
    # a stub target that declares nothing is taken at its word (no check)
    bare = target()
    bare.provides = None
    SpeculativeDecoder(bare, oracle_drafter(SCRIPT), LVSpecVerifier(scorer=AttentionMassScorer()), k=2)


class PreparingDrafter(ScriptedDrafter):
    """Records when the engine calls ``prepare`` (its prompt-side start) against ``begin`` and the first
    token's read-back (the scripted target logs the first-logits access)."""

    def __init__(self, *a, log, **kw):
        super().__init__(*a, **kw)
        self.log = log

    def prepare(self, target, state) -> None:
        self.log.append(("prepare", id(state)))

    def begin(self, target, state, first_token: int) -> None:
        self.log.append(("begin", id(state)))
        super().begin(target, state, first_token)


@pytest.mark.parametrize("first_is_eos", [False, True])
def test_prepare_runs_in_the_prefill_before_the_first_token(first_is_eos):
    script = [1, 3, 4] if first_is_eos else SCRIPT
    t = target(eos=1 if first_is_eos else None, script=script)
    log: list = []
    seen = t.prefill

    def prefill(request, need=frozenset()):
        state = seen(request, need)
        log.append(("prefill", id(state)))
        return state

    t.prefill = prefill
    d = PreparingDrafter(oracle_drafter(script).propose_fn, log=log)
    res = SpeculativeDecoder(t, d, k=3).generate(REQ, max_new_tokens=len(script))
    sid = log[0][1]
    if first_is_eos:  # nothing to decode: the prepared start is dropped, begin never runs
        assert log == [("prefill", sid), ("prepare", sid)] and list(res.token_ids) == [1]
    else:
        assert log == [("prefill", sid), ("prepare", sid), ("begin", sid)]
        assert list(res.token_ids) == SCRIPT
    assert res.timings.draft_prefill_s <= res.timings.prefill_s
    assert res.timings.draft_prefill_s > 0
    # a drafter without prepare: nothing is timed for it
    plain = SpeculativeDecoder(target(), oracle_drafter(SCRIPT), k=3).generate(REQ, max_new_tokens=len(SCRIPT))
    assert plain.timings.draft_prefill_s == 0.0


def test_loose_verifiers_see_the_targets_stop_ids():
    # The target answers "2" and ends (EOS = 1); the draft runs on past the end. λ = 1 with the
    # "always" predicate relaxes every mismatch, except one where the target (or draft) ends.
    from vidspec.decoding.verifiers.factory import build_verifier

    script = [2, 1, 4, 5, 6, 7]
    t = target(eos=1, script=script)
    verifier = build_verifier("lvspec-pst", lam=1.0, predicate="always", protected_ids=())
    drafter = oracle_drafter(script, wrong_at=lambda i: i == 1)  # drafts 2 where the target says EOS
    res = SpeculativeDecoder(t, drafter, verifier, k=4).generate(REQ, max_new_tokens=8)
    assert list(res.token_ids) == [2, 1] and res.finish_reason == "eos"
