"""A drafter drafts at each request's temperature and top-p, not at the one it was built with.

``build_decoder(..., temperature=T)`` gives the drafter a temperature, but ``generate``/``stream``
verify at the request's. For the call the drafter follows the request (greedy drafts for a greedy
request, sampled drafts with their distributions for a sampling one, sharing the request's RNG),
and its own settings come back afterwards, so one decoder serves both kinds of request.
"""

from __future__ import annotations

import pytest
import torch

from vidspec.decoding.drafters.sparrow import new_sparrow_for
from vidspec.decoding.methods import build_decoder
from vidspec.decoding.types import Request

NAME = "tiny-qwen2.5-vl"
N = 20
K = 3
CASES = [("sd", "eager"), ("sd", "fast"), ("sparrow", "eager"), ("sparrow", "fast")]


def _decoder(tiny, method: str, engine: str, temperature: float):
    target = tiny(NAME)
    draft = tiny(NAME + "-draft") if method == "sd" else new_sparrow_for(target)
    # adaptive=False: every round drafts (the spies below watch the drafter's calls in every round)
    return build_decoder(method, target=target, draft=draft, k=K, temperature=temperature, engine=engine,
                         adaptive=False)


def _ar(tiny, engine: str, request: Request) -> tuple[int, ...]:
    return build_decoder("ar", target=tiny(NAME), engine=engine).generate(request, max_new_tokens=N).token_ids


def _spy(monkeypatch, drafter) -> list[dict]:
    """Record the drafter's settings and its proposal at every ``propose``."""
    calls: list[dict] = []
    real = drafter.propose

    def propose(k):
        proposal = real(k)
        calls.append({"temperature": drafter.temperature, "top_p": drafter.top_p, "generator": drafter.generator,
                      "proposal": proposal})
        return proposal

    monkeypatch.setattr(drafter, "propose", propose)
    return calls


def _settings(drafter) -> tuple:
    return drafter.temperature, drafter.top_p, drafter.generator


@pytest.fixture
def request_(clip):
    return Request("Describe the video.", clip)


@pytest.mark.parametrize(("method", "engine"), CASES)
def test_greedy_built_decoder_samples_drafts_for_a_sampling_request(tiny, request_, monkeypatch, method, engine):
    dec = _decoder(tiny, method, engine, temperature=0.0)
    before = _settings(dec.drafter)
    calls = _spy(monkeypatch, dec.drafter)
    dec.generate(request_, max_new_tokens=N, temperature=0.7, top_p=0.9, seed=1)
    assert calls
    for c in calls:
        assert c["temperature"] == 0.7 and c["top_p"] == 0.9 and c["generator"] is not None
        p = c["proposal"]
        if p.tokens:
            # Strict rejection sampling needs q: a sampling drafter reports one distribution per token.
            assert p.probs is not None and p.probs.shape[0] == len(p.tokens)
            assert torch.allclose(p.probs.sum(-1), torch.ones(len(p.tokens)), atol=1e-4)
            assert all(float(p.probs[i, t]) > 0 for i, t in enumerate(p.tokens))
    assert _settings(dec.drafter) == before == (0.0, 1.0, None)


@pytest.mark.parametrize(("method", "engine"), CASES)
def test_sampling_built_decoder_drafts_greedily_for_a_greedy_request(tiny, request_, monkeypatch, method, engine):
    dec = _decoder(tiny, method, engine, temperature=0.8)
    calls = _spy(monkeypatch, dec.drafter)
    out = dec.generate(request_, max_new_tokens=N)
    assert out.token_ids == _ar(tiny, engine, request_)
    assert calls and all(c["temperature"] == 0.0 and c["proposal"].probs is None for c in calls)
    assert _settings(dec.drafter) == (0.8, 1.0, None)


@pytest.mark.parametrize(("method", "engine"), CASES)
def test_one_decoder_alternates_greedy_and_sampling_requests(tiny, request_, method, engine):
    dec = _decoder(tiny, method, engine, temperature=0.0)
    ar = _ar(tiny, engine, request_)
    greedy = [dec.generate(request_, max_new_tokens=N).token_ids]
    s1 = dec.generate(request_, max_new_tokens=N, temperature=0.7, seed=3).token_ids
    greedy.append(dec.generate(request_, max_new_tokens=N).token_ids)
    s2 = dec.generate(request_, max_new_tokens=N, temperature=0.7, seed=3).token_ids
    streamed = "".join(dec.stream(request_, max_new_tokens=N))
    assert all(g == ar for g in greedy)
    assert streamed == dec.target.decode(list(ar))
    assert s1 == s2 and len(s1) == N
    assert _settings(dec.drafter) == (0.0, 1.0, None)
    # The output of a seeded sampling request does not depend on the temperature the decoder was built with.
    other = _decoder(tiny, method, engine, temperature=1.3)
    assert other.generate(request_, max_new_tokens=N, temperature=0.7, seed=3).token_ids == s1


def test_stream_follows_the_request_and_restores_when_closed(tiny, request_, monkeypatch):
    dec = _decoder(tiny, "sd", "eager", temperature=0.0)
    calls = _spy(monkeypatch, dec.drafter)
    text = dec.generate(request_, max_new_tokens=N, temperature=0.7, seed=4).text
    assert "".join(dec.stream(request_, max_new_tokens=N, temperature=0.7, seed=4)) == text
    assert calls and all(c["temperature"] == 0.7 for c in calls)
    assert _settings(dec.drafter) == (0.0, 1.0, None)

    it = dec.stream(request_, max_new_tokens=N, temperature=0.7, seed=4)
    next(it)
    it.close()  # an abandoned stream gives the settings back too
    assert _settings(dec.drafter) == (0.0, 1.0, None)


def test_settings_come_back_after_an_error(tiny, request_, monkeypatch):
    dec = _decoder(tiny, "sd", "eager", temperature=0.0)

    def fail(k):
        raise RuntimeError("boom")

    monkeypatch.setattr(dec.drafter, "propose", fail)
    with pytest.raises(RuntimeError, match="boom"):
        dec.generate(request_, max_new_tokens=N, temperature=0.7, seed=0)
    assert _settings(dec.drafter) == (0.0, 1.0, None)
