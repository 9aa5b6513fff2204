"""``build_decoder(engine="fast")`` and ``vidspec generate --engine``: every method on FastTarget.

On CPU (fp32, no graphs) the fast engine's strict methods must be token-identical to the eager
engine's AR output; a loose method must decide as on the eager engine (same relevance scores up to
float rounding, hence the same tokens). The CUDA test at the end is opt-in (``pytest -m gpu``).
"""

from __future__ import annotations

import json

import pytest
import torch

from vidspec.decoding.config import DEFAULT_FAST_MAX_LEN
from vidspec.decoding.drafters.sparrow import SparrowDrafter, new_sparrow_for
from vidspec.decoding.errors import ConfigError
from vidspec.decoding.fast import FastModelDrafter, FastStrictVerifier, FastTarget
from vidspec.decoding.fast.sparrow_drafter import FastSparrowDrafter
from vidspec.decoding.loops.chain import SpeculativeDecoder
from vidspec.decoding.methods import build_decoder, sparrow_drafter_class
from vidspec.decoding.types import Request
from vidspec.decoding.verifiers.strict import StrictVerifier

FAMILIES = ["tiny-qwen2.5-vl", "tiny-llava-ov"]
N = 16
FAST = {"max_len": 1024}


@pytest.fixture(scope="module")
def sparrows():
    """One random Sparrow draft per family (seeded), shared by the tests of this module."""
    cache: dict = {}

    def get(target):
        if target.name not in cache:
            cache[target.name] = new_sparrow_for(target, seed=0)
        return cache[target.name]

    return get


def perturbed(name: str):
    """A draft that agrees with its target often but not always: the target with a noisy LM head."""
    from vidspec.decoding.models import load_target

    m = load_target(name)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        m.model.lm_head.weight.add_(0.1 * torch.randn_like(m.model.lm_head.weight))
    return m


@pytest.mark.parametrize("name", FAMILIES)
def test_strict_methods_on_fast_engine_equal_eager_ar(tiny, clip, sparrows, name):
    target, draft = tiny(name), perturbed(name)
    req = Request("What happens in this video?", clip)
    want = build_decoder("ar", target=target).generate(req, max_new_tokens=N).token_ids

    ar = build_decoder("ar", target=target, engine="fast", fast_options=FAST)
    assert isinstance(ar.target, FastTarget) and isinstance(ar.verifier, FastStrictVerifier)
    assert ar.generate(req, max_new_tokens=N).token_ids == want

    # sd with a draft right sometimes (partial acceptance and rollback run), then with the target's own
    # module as draft (two FastTargets over one module; every draft token kept).
    steps = {}
    for label, dm, k in (("perturbed", draft, 3), ("self", target, 4)):
        sd = build_decoder("sd", target=ar.target, draft=dm, k=k, engine="fast", fast_options=FAST)
        assert sd.target is ar.target  # a FastTarget is not wrapped twice
        assert isinstance(sd.drafter, FastModelDrafter) and isinstance(sd.verifier, FastStrictVerifier)
        assert isinstance(sd.drafter.model, FastTarget) and sd.drafter.model is not sd.target
        res = sd.generate(req, max_new_tokens=N)
        assert res.token_ids == want, label
        steps[label] = res.steps
    assert 0 < sum(s.accepted for s in steps["perturbed"]) < sum(s.drafted for s in steps["perturbed"])
    assert all(s.accepted == 4 for s in steps["self"][:-1])

    sp = build_decoder("sparrow", target=ar.target, draft=sparrows(target), k=3, engine="fast")
    assert type(sp.drafter) is FastSparrowDrafter and isinstance(sp.verifier, FastStrictVerifier)
    assert sp.generate(req, max_new_tokens=N).token_ids == want


def _recording(decoder) -> list[tuple[float, ...]]:
    """Record the relevance scores of every round the decoder's loose verifier judges."""
    seen: list[tuple[float, ...]] = []
    verify = decoder.verifier.verify

    def wrapped(proposal, out, ctx):
        d = verify(proposal, out, ctx)
        seen.append(tuple(decoder.verifier.draft_scores(out, ctx, len(proposal.tokens))))
        return d

    decoder.verifier.verify = wrapped
    return seen


@pytest.mark.parametrize("name", FAMILIES)
def test_lvspec_pst_fast_equals_eager(tiny, clip, name):
    """Same options on both engines: relevance scores agree to float rounding, and so do the tokens.

    The scores are cosines of middle-layer hidden states computed by two implementations of the
    same fp32 model (HF eager vs FastLM), so they are equal only up to rounding (~1e-6); the λ
    rule compares scores with each other, and on these models no two sit that close, so every
    loose/PST decision and every token is the same.
    """
    target, draft = tiny(name), tiny(name + "-draft")
    req = Request("Describe the video.", clip)
    loose = dict(lam=0.7, top_n=10, pst_window=3, predicate="always")  # the paper's rule: relevance decides
    eager = build_decoder("lvspec-pst", target=target, draft=draft, k=4, loose=loose)
    fast = build_decoder("lvspec-pst", target=target, draft=draft, k=4, loose=loose, engine="fast",
                         fast_options=FAST)
    assert type(fast.verifier) is type(eager.verifier) and isinstance(fast.target, FastTarget)
    assert isinstance(fast.drafter, FastModelDrafter)
    se, sf = _recording(eager), _recording(fast)
    a, b = eager.generate(req, max_new_tokens=N), fast.generate(req, max_new_tokens=N)
    assert len(se) == len(sf) > 0
    for x, y in zip(se, sf):
        assert len(x) == len(y) and torch.allclose(torch.tensor(x), torch.tensor(y), atol=1e-4), (x, y)
    assert b.token_ids == a.token_ids
    assert sum(s.loose_accepted for s in b.steps) > 0  # the loose path decided something
    assert [(s.accepted, s.loose_accepted, s.shift_accepted) for s in b.steps] == [
        (s.accepted, s.loose_accepted, s.shift_accepted) for s in a.steps]


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("method,predicate", [("lvspec-pst", "always"), ("sparrow-lvspec-pst", "prob"),
                                              ("lvspec", "prob")])
def test_loose_decision_inside_the_verify_step(tiny, clip, sparrows, monkeypatch, name, method, predicate):
    """device_walk: the fast target computes the relevance-blind loose rule inside its verify steps and the
    verifier takes that decision (the host walk never runs for a drafted round); tokens and every round's
    (kept, loose, shift) counts equal the host walk's. A strict method on the same target afterwards runs its
    verify steps with no rule."""
    from vidspec.decoding.verifiers import lvspec

    target = FastTarget(tiny(name), max_len=1024)
    draft = sparrows(tiny(name)) if method.startswith("sparrow") else FastTarget(perturbed(name), max_len=1024)
    req = Request("Describe the video.", clip)
    loose = dict(lam=1.0, predicate=predicate, eps=0.05, pst_window=3)
    host = build_decoder(method, target=target, draft=draft, k=4, loose=loose, engine="fast")
    want = host.generate(req, max_new_tokens=N)

    walks = []
    walk = lvspec.loose_walk
    monkeypatch.setattr(lvspec, "loose_walk", lambda p, *a: walks.append(len(p.tokens)) or walk(p, *a))
    dev = build_decoder(method, target=target, draft=draft, k=4, loose=loose | {"device_walk": True}, engine="fast")
    got = dev.generate(req, max_new_tokens=N)
    assert got.token_ids == want.token_ids
    counts = [(s.accepted, s.loose_accepted, s.shift_accepted) for s in got.steps]
    assert counts == [(s.accepted, s.loose_accepted, s.shift_accepted) for s in want.steps]
    assert not [k for k in walks if k > 0]  # every drafted round was decided by the verify step
    if predicate == "always":
        assert sum(s.loose_accepted for s in got.steps) > 0  # the rule did relax something
    assert target._loose_spec == dev.verifier.device_spec(target.eos_token_ids)

    sd = build_decoder("sd", target=target, draft=FastTarget(perturbed(name), max_len=1024), k=4, engine="fast")
    assert sd.generate(req, max_new_tokens=N).token_ids == build_decoder("ar", target=target).generate(
        req, max_new_tokens=N).token_ids
    assert target._loose_spec is None


def test_loose_methods_build_on_fast_engine(tiny):
    target = FastTarget(tiny("tiny-llava-ov"), max_len=512)
    draft = tiny("tiny-llava-ov-draft")
    for m in ("lvspec", "fly", "sparrow-lvspec-pst"):
        d = build_decoder(m, target=target, draft=new_sparrow_for(tiny("tiny-llava-ov")) if "sparrow" in m else draft,
                          engine="fast")
        assert d.target is target and not isinstance(d.verifier, StrictVerifier)


def test_engine_checks(tiny):
    with pytest.raises(ConfigError, match="unknown engine 'turbo' \\(choose from auto, eager, fast\\)"):
        build_decoder("ar", target="no-such-model", engine="turbo")  # refused before any loading
    with pytest.raises(ConfigError, match="max_length"):
        build_decoder("ar", target="no-such-model", engine="fast", fast_options={"max_length": 5})
    fast = FastTarget(tiny("tiny-llava-ov"), max_len=256)
    with pytest.raises(ConfigError, match="one FastTarget"):
        build_decoder("sd", target=fast, draft=fast, engine="fast")
    assert sparrow_drafter_class("eager") is SparrowDrafter and sparrow_drafter_class("fast") is FastSparrowDrafter
    with pytest.raises(ConfigError):
        sparrow_drafter_class("turbo")
    # max_len defaults to DEFAULT_FAST_MAX_LEN
    dec = build_decoder("ar", target=tiny("tiny-llava-ov"), engine="fast")
    assert dec.target.lm.max_len == DEFAULT_FAST_MAX_LEN


@pytest.fixture(scope="module")
def video(tmp_path_factory, clip):
    from vidspec.decoding.fixtures import write_test_video

    return str(write_test_video(tmp_path_factory.mktemp("v") / "clip.mp4", clip.frames, fps=4))


def test_cli_engine(capfd, video):
    from vidspec.decoding.cli import main

    common = ["generate", "--target", "tiny-llava-ov", "--video", video, "--max-new-tokens", "12", "--json"]
    got = {}
    for engine, method in (("eager", "ar"), ("fast", "sd")):
        code = main([*common, "--method", method, "--engine", engine, "--k", "3"])
        out, err = capfd.readouterr()
        assert code == 0, err
        got[engine] = json.loads(out.strip().splitlines()[-1])
    assert got["fast"]["engine"] == "fast" and got["fast"]["token_ids"] == got["eager"]["token_ids"]

    code = main([*common, "--engine", "turbo"])
    _, err = capfd.readouterr()
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "unknown engine 'turbo'" in lines[0] and "eager, fast" in lines[0]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", FAMILIES)
def test_fast_engine_equals_eager_on_cuda_fp32(clip, name):
    """On CUDA (graphs, fp32) the fast engine's greedy ar and sparrow equal eager ar token for token."""
    from vidspec.decoding.models import load_target

    target = load_target(name, device="cuda", dtype="float32")
    req = Request("What happens in this video?", clip)
    want = SpeculativeDecoder(target).generate(req, max_new_tokens=32).token_ids
    ar = build_decoder("ar", target=target, engine="fast", fast_options={"max_len": 2048})
    assert ar.target.graphs
    for _ in range(2):  # the first decode captures the graphs, the second replays them
        assert ar.generate(req, max_new_tokens=32).token_ids == want
    sp = build_decoder("sparrow", target=ar.target, draft=new_sparrow_for(target, seed=0), k=4, engine="fast")
    eager_sp = build_decoder("sparrow", target=target, draft=new_sparrow_for(target, seed=0), k=4)
    assert eager_sp.generate(req, max_new_tokens=32).token_ids == want
    for _ in range(2):
        assert sp.generate(req, max_new_tokens=32).token_ids == want


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", FAMILIES)
def test_loose_decision_inside_cuda_graphs(clip, name):
    """On CUDA (graphs, fp32) the loose rule captured in the verify graphs (device_walk) decides as the host walk,
    on the first decode (capture) and the second (replay), and strict methods on the same target stay exact."""
    from vidspec.decoding.models import load_target

    target = load_target(name, device="cuda", dtype="float32")
    req = Request("Describe the video.", clip)
    fast = FastTarget(target, max_len=2048)
    assert fast.graphs
    sp = new_sparrow_for(target, seed=0)
    loose = dict(lam=1.0, predicate="prob", eps=0.05, pst_window=3)
    want = build_decoder("sparrow-lvspec-pst", target=fast, draft=sp, k=4, loose=loose, engine="fast").generate(
        req, max_new_tokens=32)
    dev = build_decoder("sparrow-lvspec-pst", target=fast, draft=sp, k=4, loose=loose | {"device_walk": True},
                        engine="fast")
    for _ in range(2):
        got = dev.generate(req, max_new_tokens=32)
        assert got.token_ids == want.token_ids
        assert [(s.accepted, s.loose_accepted, s.shift_accepted) for s in got.steps] == [
            (s.accepted, s.loose_accepted, s.shift_accepted) for s in want.steps]
    ar = SpeculativeDecoder(target).generate(req, max_new_tokens=32).token_ids
    assert build_decoder("sparrow", target=fast, draft=sp, k=4, engine="fast").generate(
        req, max_new_tokens=32).token_ids == ar
