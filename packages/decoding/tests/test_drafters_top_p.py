"""Sampling drafters (ModelDrafter, SparrowDrafter, their fast variants) use the request's top-p, as the verifier does."""

from __future__ import annotations

import pytest

from vidspec.decoding.drafters import vlm as vlm_drafter
from vidspec.decoding.drafters.sparrow import new_sparrow_for
from vidspec.decoding.methods import build_decoder
from vidspec.decoding.types import Request
from vidspec.decoding.verifiers import strict

NAME = "tiny-qwen2.5-vl"


@pytest.fixture
def draft_calls(monkeypatch):
    """Every draft_choice call of a drafter: (top_p it used, chosen token, argmax of its logits)."""
    calls = []
    real = strict.draft_choice

    def spy(logits, temperature, top_p, generator):
        tok, dist = real(logits, temperature, top_p, generator)
        calls.append((top_p, tok, int(logits.argmax())))
        return tok, dist

    monkeypatch.setattr(strict, "draft_choice", spy)  # SparrowDrafter imports it at call time
    monkeypatch.setattr(vlm_drafter, "draft_choice", spy)  # ModelDrafter (and FastModelDrafter's sampling path)
    return calls


def _decoder(method, tiny, engine):
    target = tiny(NAME)
    draft = tiny(NAME + "-draft") if method == "sd" else new_sparrow_for(target)
    # adaptive=False: every round drafts (the test counts the draft's choices)
    return build_decoder(method, target=target, draft=draft, k=3, temperature=1.0, engine=engine, adaptive=False)


@pytest.mark.parametrize("engine", ["eager", "fast"])
@pytest.mark.parametrize("method", ["sd", "sparrow"])
def test_small_top_p_makes_the_draft_propose_the_top_token(tiny, clip, draft_calls, method, engine):
    dec = _decoder(method, tiny, engine)
    req = Request("Describe the video.", clip)
    dec.generate(req, max_new_tokens=16, temperature=1.0, top_p=1e-6, seed=0)
    assert len(draft_calls) >= 8
    assert {p for p, _, _ in draft_calls} == {1e-6}
    assert all(tok == top for _, tok, top in draft_calls), draft_calls

    # The next request's top-p replaces it: with top-p 1 the random-weight draft samples widely.
    draft_calls.clear()
    dec.generate(req, max_new_tokens=16, temperature=1.0, top_p=1.0, seed=0)
    assert {p for p, _, _ in draft_calls} == {1.0}
    assert any(tok != top for _, tok, top in draft_calls)


def test_greedy_requests_leave_the_draft_greedy(tiny, clip, draft_calls):
    dec = build_decoder("sd", target=tiny(NAME), draft=tiny(NAME + "-draft"), k=3)
    out = dec.generate(Request("Describe the video.", clip), max_new_tokens=8, top_p=0.5)
    assert out.num_new_tokens == 8 and all(tok == top for _, tok, top in draft_calls)
