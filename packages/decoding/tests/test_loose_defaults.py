"""The loose methods' defaults, the paper's rule one flag away, and the switch that makes the loose path free
where it cannot pay."""

from __future__ import annotations

import functools

import pytest

from vidspec.decoding.config import DEFAULT_LOOSE, PAPER_LOOSE, DecodeConfig, apply_loose_preset
from vidspec.decoding.errors import ConfigError
from vidspec.decoding.loops.chain import SpeculativeDecoder
from vidspec.decoding.methods import build_decoder
from vidspec.decoding.testing import oracle_drafter
from vidspec.decoding.types import Decision, Request
from vidspec.decoding.verifiers.lvspec import LVSpecConfig
from vidspec.decoding.verifiers.switch import DEFAULT_LOOSE_PATIENCE, LooseSwitch


def test_defaults_are_the_probability_gate_and_paper_is_lvspecs_rule():
    cfg = DecodeConfig()
    assert (cfg.lam, cfg.predicate, cfg.eps) == (DEFAULT_LOOSE["lam"], DEFAULT_LOOSE["predicate"], DEFAULT_LOOSE["eps"])
    assert (cfg.lam, cfg.predicate, cfg.pst_window) == (1.0, "prob", 0)  # PST off by default
    paper = DecodeConfig.paper(k=6)
    assert (paper.lam, paper.predicate, paper.eps, paper.pst_window, paper.k) == (0.7, "always", 0.01, 3, 6)
    # The paper's rule is LVSpecConfig's (the algorithm's own defaults, docs/algorithms.md).
    ref = LVSpecConfig()
    assert {k: getattr(ref, k) for k in PAPER_LOOSE} == PAPER_LOOSE


def test_pst_window_zero_turns_pst_off(tiny, clip):
    t, d = tiny("tiny-qwen2.5-vl"), tiny("tiny-qwen2.5-vl-draft")
    req = Request("Describe the video.", clip)
    base = {"lam": 1.0, "predicate": "always", "k": 4, "adaptive": False}
    with_pst = build_decoder("lvspec-pst", target=t, draft=d, config=DecodeConfig(**base, pst_window=3))
    without = build_decoder("lvspec-pst", target=t, draft=d, config=DecodeConfig(**base, pst_window=0))
    plain = build_decoder("lvspec", target=t, draft=d, config=DecodeConfig(**base))
    assert without.verifier.device_spec(()).shift is False and with_pst.verifier.device_spec(()).shift is True
    res = without.generate(req, max_new_tokens=32)
    assert res.shift_accepted == 0 and res.token_ids == plain.generate(req, max_new_tokens=32).token_ids
    with pytest.raises(ConfigError, match="pst_window"):
        DecodeConfig(pst_window=-1)


def test_demo_takes_its_rules_from_the_config():
    demo = pytest.importorskip("vidspec.evaluation.demo")
    assert demo.DEMO_LOOSE == DEFAULT_LOOSE and demo.PAPER_LOOSE == PAPER_LOOSE


def test_preset_keeps_explicit_flags_and_refuses_unknown_names():
    base = DecodeConfig().to_dict()
    paper = apply_loose_preset(base, "paper", ["--loose", "paper", "--lam", "0.5"])
    assert (paper["lam"], paper["predicate"], paper["eps"]) == (1.0, "always", 0.01)  # --lam given: kept as parsed
    assert apply_loose_preset(base, "paper", ["--eps=0.2"])["eps"] == base["eps"]
    assert apply_loose_preset(base, None, []) == base
    with pytest.raises(ConfigError, match="unknown --loose"):
        apply_loose_preset(base, "fast", [])


def test_generate_parses_loose_paper(monkeypatch):
    from vidspec.decoding import commands

    seen = {}

    @functools.wraps(commands.generate)
    def fake(**kw):
        seen.update(kw)
        return 0

    monkeypatch.setattr(commands, "generate", fake)
    assert commands.generate_main(["--video", "v.mp4", "--prompt", "p", "--loose", "paper", "--eps", "0.2"]) == 0
    decode = seen["decode"]
    assert (decode.lam, decode.predicate, decode.eps) == (0.7, "always", 0.2)
    seen.clear()
    assert commands.generate_main(["--video", "v.mp4", "--prompt", "p"]) == 0
    assert seen["decode"] == DecodeConfig()


def test_switch_turns_off_after_quiet_rounds_only():
    sw = LooseSwitch(patience=3)
    strict, loose = Decision(2, 0, ("strict", "strict")), Decision(2, 0, ("strict", "loose"))
    assert [sw.update(4, d, i) for i, d in enumerate([strict, strict, loose, strict, strict])] == [False] * 5
    assert sw.on and sw.update(0, strict, 9) is False  # a round that drafted nothing is not evidence
    assert sw.update(4, strict, 10) is True and not sw.on
    assert sw.record() == {"loose_stopped_at": 10, "loose_rounds": 6, "loose_helped_rounds": 1}
    assert sw.update(4, loose, 11) is False  # off stays off for the request
    sw.start()
    assert sw.on and sw.record()["loose_stopped_at"] is None
    with pytest.raises(ValueError):
        LooseSwitch(patience=0)


class _Counter:
    """Counts a decode's target verify steps, the hidden states they were asked for, the steps that carried a
    loose rule (fast target) and the drafter's proposals."""

    def __init__(self, dec: SpeculativeDecoder) -> None:
        self.verify = self.mid = self.loose_steps = self.propose = 0
        target = dec.target
        verify, propose = target.verify, dec.drafter.propose

        def counted_verify(state, tokens, need=frozenset()):
            self.verify += 1
            self.mid += "mid" in need
            return verify(state, tokens, need)

        def counted_propose(k):
            self.propose += 1
            return propose(k)

        dec.target = _Proxy(target, verify=counted_verify)
        dec.drafter.propose = counted_propose
        lm = getattr(target, "lm", None)
        if lm is not None:
            step = lm.step

            def counted_step(*args, loose=None, **kw):
                self.loose_steps += loose is not None
                return step(*args, loose=loose, **kw)

            lm.step = counted_step


class _Proxy:
    def __init__(self, inner, **overrides) -> None:
        self._inner, self._overrides = inner, overrides

    def __getattr__(self, name):
        return self._overrides[name] if name in self._overrides else getattr(self._inner, name)


RULES = {"default": {}, "gate": {"eps": 0.3, "pst_window": 3}, "paper": dict(PAPER_LOOSE)}


@pytest.mark.parametrize("engine", ["eager", "fast"])
@pytest.mark.parametrize("rule", list(RULES))
def test_matching_draft_costs_sparrow_lvspec_pst_no_more_than_sparrow(tiny, clip, drafts, engine, rule):
    """With a draft that always matches the target the loose rule can never help: sparrow-lvspec-pst then
    makes exactly sparrow's target and drafter calls. The defaults are verified strictly from the first round
    (no rule in the verify step, no relevance); a looser rule stops after the switch's patience."""
    from vidspec.decoding.fast import FastTarget

    name = "tiny-qwen2.5-vl"
    base = tiny(name)
    req = Request("Describe the video.", clip)
    max_new = 24 * 5  # 24 rounds of K 4 + bonus when every draft is accepted
    ar = build_decoder("ar", target=base).generate(req, max_new_tokens=max_new)
    cfg = DecodeConfig(engine=engine, k=4, **RULES[rule])
    runs = {}
    for method in ("sparrow", "sparrow-lvspec-pst"):
        target = FastTarget(base, max_len=1024) if engine == "fast" else base
        dec = build_decoder(method, target=target, draft=drafts(name), config=cfg)
        dec.drafter = oracle_drafter(list(ar.token_ids), vocab=10**6)
        count = _Counter(dec)
        res = dec.generate(req, max_new_tokens=max_new)
        runs[method] = (res, count, dec.last_adaptation)
    (sp, c_sp, _), (lv, c_lv, record) = runs["sparrow"], runs["sparrow-lvspec-pst"]
    assert sp.token_ids == lv.token_ids == ar.token_ids
    assert len(sp.steps) > DEFAULT_LOOSE_PATIENCE  # long enough for the switch to act
    assert (c_lv.verify, c_lv.propose) == (c_sp.verify, c_sp.propose)
    assert record["loose_stopped_at"] is not None and record["loose_helped_rounds"] == 0
    assert c_sp.mid == 0 and c_sp.loose_steps == 0
    assert c_lv.mid <= (DEFAULT_LOOSE_PATIENCE if rule == "paper" else 0)  # only the paper's rule reads relevance
    if engine == "fast" and rule == "gate":
        assert 0 < c_lv.loose_steps <= DEFAULT_LOOSE_PATIENCE  # the rule ran in the verify step, then stopped
    else:
        assert c_lv.loose_steps == 0


@pytest.mark.parametrize(("changes", "strict"), [
    ({}, True), ({"eps": 0.3}, False), ({"pst_window": 3}, False), ({"lam": 0.0, "predicate": "always"}, True),
    ({"predicate": "topk", "top_k": 1}, True), ({"predicate": "always"}, False), (dict(PAPER_LOOSE), False)])
def test_strict_equivalent_rules(tiny, changes, strict):
    from vidspec.decoding.methods import build_verifier_for

    verifier = build_verifier_for("sparrow-lvspec-pst", tiny("tiny-qwen2.5-vl"), DecodeConfig(**changes).loose_options())
    assert verifier.strict_equivalent is strict
    if strict:
        assert verifier.device_spec(()) is None


def test_switch_follows_adaptive_and_can_be_given(tiny):
    t = tiny("tiny-qwen2.5-vl")
    assert build_decoder("sd", target=t).loose_switch is not None  # attached; it watches loose verifiers only
    assert build_decoder("lvspec", target=t, adaptive=False).loose_switch is None
    dec = SpeculativeDecoder(t, oracle_drafter([1, 2, 3]), k=2, loose_switch=LooseSwitch(patience=2))
    assert dec.loose_switch.patience == 2
