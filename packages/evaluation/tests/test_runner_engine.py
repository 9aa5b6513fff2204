"""``vidspec eval --engine {eager,fast}``: the fast engine in the side-by-side runner, on CPU tiny models."""

from __future__ import annotations

import json

import pytest

from vidspec.decoding.cli import main
from vidspec.decoding.errors import ConfigError
from vidspec.decoding.methods import METHODS
from vidspec.evaluation import runner as runner_mod
from vidspec.evaluation.records import read_jsonl
from vidspec.evaluation.runner import EvalConfig, EvalModels, build_decoders
from vidspec.evaluation.synthvid import SynthVidConfig, generate_synthvid


@pytest.fixture(scope="module")
def synthvid(tmp_path_factory):
    out = tmp_path_factory.mktemp("sv") / "sv"
    return generate_synthvid(out, SynthVidConfig(num_videos=1, seed=0, preset="easy", size="64x64",
                                                 split="validation", mcq_per_video=1, open_per_video=0),
                             progress=False)


def _eval(capfd, synthvid, out, *args: str) -> tuple[int, str]:
    code = main(["eval", "--benchmark", "synthvid_captions", "--data", str(synthvid), "--out", str(out),
                 "--max-new-tokens", "8", "--no-progress", "--warmup", "false", "--report", "false", *args])
    _, err = capfd.readouterr()
    return code, err


def _one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


def test_eval_fast_engine_records_and_refuses_another_engine_on_resume(capfd, synthvid, tmp_path):
    fast, eager = tmp_path / "fast", tmp_path / "eager"
    code, err = _eval(capfd, synthvid, fast, "--engine", "fast", "--methods", "ar,sd,lvspec-pst,sparrow",
                      "--sparrow", "random")
    assert code == 0, err
    code, err = _eval(capfd, synthvid, eager, "--methods", "ar")
    assert code == 0, err

    for name in ("config.json", "summary.json"):
        on_disk = json.loads((fast / name).read_text())
        assert (on_disk["config"] if name == "summary.json" else on_disk)["decode"]["engine"] == "fast"
    assert json.loads((eager / "config.json").read_text())["decode"]["engine"] == "eager"
    records = {r["method"]: r for r in read_jsonl(fast / "records.jsonl")}
    assert set(records) == {"ar", "sd", "lvspec-pst", "sparrow"}
    for m in ("sd", "sparrow"):
        assert records[m]["token_identical_to_ar"], m
    (eager_ar,) = read_jsonl(eager / "records.jsonl")
    assert records["ar"]["token_ids"] == eager_ar["token_ids"]  # fast AR == eager AR

    # Resuming the fast run on the eager engine would mix incomparable timings in one folder.
    code, err = _eval(capfd, synthvid, fast, "--engine", "eager", "--methods", "ar,sd,lvspec-pst,sparrow",
                      "--sparrow", "random")
    assert code == 2 and "engine: 'fast' -> 'eager'" in _one_line(err)


def test_unknown_engine_is_one_line(capfd, synthvid, tmp_path):
    code, err = _eval(capfd, synthvid, tmp_path / "x", "--engine", "turbo")
    assert code == 2 and "unknown engine 'turbo' (choose from auto, eager, fast)" in _one_line(err)
    assert not (tmp_path / "x").exists()
    with pytest.raises(ConfigError, match="fast-max-len"):
        EvalConfig.from_flags(benchmark="b", out="x", engine="fast", fast_max_len=0)


def test_fast_gemv_is_checked_and_reaches_the_fast_target(capfd, synthvid, tmp_path, monkeypatch):
    """--fast-gemv: unknown modes and Triton modes off CUDA are one-line errors before the run folder
    exists; "off" is the default, recorded, and old runs without the field resume with it."""
    code, err = _eval(capfd, synthvid, tmp_path / "x", "--engine", "fast", "--fast-gemv", "turbo")
    assert code == 2 and "unknown --fast-gemv 'turbo' (choose from off, decode, all)" in _one_line(err)
    code, err = _eval(capfd, synthvid, tmp_path / "x", "--engine", "fast", "--fast-gemv", "all")
    assert code == 2 and "--fast-gemv all needs --engine fast on a CUDA device" in _one_line(err)
    assert not (tmp_path / "x").exists()
    with pytest.raises(ConfigError, match="needs --engine fast"):
        EvalConfig.from_flags(benchmark="b", out="x", engine="eager", device="cuda", fast_gemv="decode")
    assert EvalConfig.from_flags(benchmark="b", out="x", methods="ar", engine="fast", device="cuda:1", fast_gemv="all").decode.fast_gemv == "all"
    cfg = EvalConfig.from_flags(benchmark="synthvid_captions", out=str(tmp_path), methods="ar")
    old = cfg.flat()
    del old["fast_gemv"]
    (tmp_path / "config.json").write_text(json.dumps(old))
    runner_mod._check_resume(tmp_path, cfg)  # no error: recorded before the option, i.e. "off"
    # the mode reaches FastTarget as its gemv option
    seen = []
    monkeypatch.setattr(runner_mod, "as_fast", lambda model, opts: seen.append(opts) or model)
    from vidspec.decoding.config import GEMV_MODES

    assert GEMV_MODES == {"off": False, "decode": True, "all": "all"}
    monkeypatch.setattr(runner_mod, "build_decoder", lambda *a, **kw: None)
    fast = EvalConfig.from_flags(benchmark="b", out=str(tmp_path), methods="ar", engine="fast", device="cuda", fast_gemv="decode")
    runner_mod.build_decoders(fast, runner_mod.EvalModels(target=object()))
    assert len(seen) == 1 and seen[0]["gemv"] is True


def test_fast_compile_off_reaches_the_target_and_every_sparrow_drafter(capfd, synthvid, tmp_path, monkeypatch):
    """--fast-compile false: FastTarget and both Sparrow drafters get compile=False (nothing left to compile);
    the default leaves each its own default (compile on CUDA); recorded, and a resume with the other value is refused."""
    from vidspec.decoding.drafters.sparrow import new_sparrow_for
    from vidspec.decoding.models import load_target

    target = load_target("tiny-llava-ov")
    models = EvalModels(target=target, sparrow=new_sparrow_for(target, seed=0))
    base = dict(benchmark="b", out=str(tmp_path), sparrow="random", engine="fast", fast_max_len=512,
                methods="ar,sparrow,tree-sparrow", tree_total=8, tree_depth=2, tree_top_k=2)
    want = {}
    for on in (True, False):
        decs = build_decoders(EvalConfig.from_flags(**base, fast_compile=on), models)
        want[on] = (decs["sparrow"].drafter.want_compile, decs["tree-sparrow"].drafter.chain.want_compile)
    assert want == {True: (None, None), False: (False, False)}
    seen = []
    monkeypatch.setattr(runner_mod, "as_fast", lambda model, opts: seen.append(opts) or model)
    monkeypatch.setattr(runner_mod, "build_decoder", lambda *a, **kw: None)
    for on in (True, False):
        runner_mod.build_decoders(EvalConfig.from_flags(**{**base, "methods": "ar"}, fast_compile=on), EvalModels(target=object()))
    assert [o.get("compile", "default") for o in seen] == ["default", False]
    monkeypatch.undo()

    out = tmp_path / "run"
    code, err = _eval(capfd, synthvid, out, "--engine", "fast", "--methods", "ar,sparrow", "--sparrow", "random",
                      "--fast-compile", "false")
    assert code == 0, err
    assert json.loads((out / "config.json").read_text())["decode"]["fast_compile"] is False
    records = {r["method"]: r for r in read_jsonl(out / "records.jsonl")}
    assert records["sparrow"]["token_identical_to_ar"]
    code, err = _eval(capfd, synthvid, out, "--engine", "fast", "--methods", "ar,sparrow", "--sparrow", "random")
    assert code == 2 and "fast_compile: False -> True" in _one_line(err)


def test_one_fast_target_per_loaded_model(tmp_path):
    from vidspec.decoding.drafters.sparrow import new_sparrow_for
    from vidspec.decoding.fast import FastTarget
    from vidspec.decoding.models import load_target

    target, draft = load_target("tiny-llava-ov"), load_target("tiny-llava-ov-draft")
    models = EvalModels(target=target, draft=draft, sparrow=new_sparrow_for(target, seed=0))
    cfg = EvalConfig.from_flags(benchmark="b", out=str(tmp_path), sparrow="random", engine="fast", fast_max_len=512)
    decs = build_decoders(cfg, models)
    assert set(decs) == set(METHODS)
    fast_target = decs["ar"].target
    assert isinstance(fast_target, FastTarget) and fast_target.adapter is target and fast_target.lm.max_len == 512
    assert all(d.target is fast_target for d in decs.values())  # one KV cache for the target, all methods
    drafts = {id(decs[m].drafter.model) for m in ("sd", "lvspec", "lvspec-pst", "fly")}
    assert len(drafts) == 1 and decs["sd"].drafter.model.adapter is draft  # one for the draft VLM
    assert decs["sd"].drafter.model is not fast_target

    # A draft VLM that is the target's own module still gets a FastTarget of its own.
    same = build_decoders(cfg, EvalModels(target=target, draft=target, sparrow=models.sparrow))
    assert same["sd"].drafter.model is not same["sd"].target
    assert same["sd"].drafter.model.adapter is same["sd"].target.adapter is target

    eager = build_decoders(EvalConfig.from_flags(benchmark="b", out=str(tmp_path), sparrow="random"), models)
    assert all(d.target is target for d in eager.values())


def test_device_rounds_option_reaches_every_drafting_decoder(tmp_path):
    from vidspec.decoding.drafters.sparrow import new_sparrow_for
    from vidspec.decoding.models import load_target

    target, draft = load_target("tiny-llava-ov"), load_target("tiny-llava-ov-draft")
    models = EvalModels(target=target, draft=draft, sparrow=new_sparrow_for(target, seed=0))
    for on in (True, False):
        cfg = EvalConfig.from_flags(benchmark="b", out=str(tmp_path), sparrow="random", engine="fast", fast_max_len=512,
                         device_rounds=on, tree_total=8, tree_depth=2, tree_top_k=2)
        decs = build_decoders(cfg, models)
        assert {m: getattr(d, "device_rounds", None) for m, d in decs.items() if m != "ar"} == {
            m: on for m in METHODS if m != "ar"}


def test_loose_device_option_reaches_the_loose_verifiers(capfd, synthvid, tmp_path):
    """--loose_device true: every LVSpec verifier of the run asks for the rule inside the verify step (FLy and the
    strict methods are untouched); recorded, and a run with it gives the host walk's tokens."""
    from vidspec.decoding.drafters.sparrow import new_sparrow_for
    from vidspec.decoding.models import load_target

    target, draft = load_target("tiny-llava-ov"), load_target("tiny-llava-ov-draft")
    models = EvalModels(target=target, draft=draft, sparrow=new_sparrow_for(target, seed=0))
    for on in (True, False):
        cfg = EvalConfig.from_flags(benchmark="b", out=str(tmp_path), sparrow="random", engine="fast", fast_max_len=512,
                         loose_device=on, lam=1.0, predicate="prob", eps=0.05)
        decs = build_decoders(cfg, models)
        assert {m: decs[m].verifier.config.device_walk for m in ("lvspec", "lvspec-pst", "sparrow-lvspec-pst")} == {
            m: on for m in ("lvspec", "lvspec-pst", "sparrow-lvspec-pst")}
        assert not hasattr(decs["fly"].verifier.config, "device_walk")

    runs = {}
    for on in ("true", "false"):
        out = tmp_path / f"run-{on}"
        code, err = _eval(capfd, synthvid, out, "--engine", "fast", "--methods", "ar,lvspec-pst", "--lam", "1.0",
                          "--predicate", "always", "--loose_device", on)
        assert code == 0, err
        assert json.loads((out / "config.json").read_text())["decode"]["loose_device"] is (on == "true")
        runs[on] = {r["sample_id"]: (r["token_ids"], r["loose_accepted"], r["shift_accepted"])
                    for r in read_jsonl(out / "records.jsonl") if r["method"] == "lvspec-pst"}
    assert runs["true"] == runs["false"] and runs["true"]


def test_sparrow_k_sets_the_sparrow_chains_k_only(tmp_path):
    from vidspec.decoding.drafters.sparrow import new_sparrow_for
    from vidspec.decoding.models import load_target

    target, draft = load_target("tiny-llava-ov"), load_target("tiny-llava-ov-draft")
    models = EvalModels(target=target, draft=draft, sparrow=new_sparrow_for(target, seed=0))
    cfg = EvalConfig.from_flags(benchmark="b", out=str(tmp_path), sparrow="random", k=3, sparrow_k=7)
    ks = {m: d.k for m, d in build_decoders(cfg, models).items()}
    assert ks["sparrow"] == ks["sparrow-lvspec-pst"] == 7
    assert ks["sd"] == ks["lvspec"] == ks["fly"] == 3 and ks["ar"] == 0
    default = {m: d.k for m, d in build_decoders(EvalConfig.from_flags(benchmark="b", out=str(tmp_path), sparrow="random",
                                                             k=3), models).items()}
    assert default["sparrow"] == 3
    with pytest.raises(ConfigError, match="sparrow-k"):
        EvalConfig.from_flags(benchmark="b", out="x", sparrow_k=0)


def test_runs_recorded_before_the_engine_option_resume_as_eager(tmp_path):
    cfg = EvalConfig.from_flags(benchmark="synthvid_captions", out=str(tmp_path), methods="ar")
    old = cfg.flat()
    del old["engine"], old["fast_max_len"]
    (tmp_path / "config.json").write_text(json.dumps(old))
    runner_mod._check_resume(tmp_path, cfg)  # no error
    with pytest.raises(ConfigError, match="engine"):
        runner_mod._check_resume(tmp_path, EvalConfig.from_flags(**{**cfg.to_dict(), "engine": "fast"}))


def test_eval_scorer_is_recorded_and_refused_another_on_resume(capfd, synthvid, tmp_path):
    """``vidspec eval --scorer attention`` reaches the verifier and is part of the run's config."""
    out = tmp_path / "att"
    code, err = _eval(capfd, synthvid, out, "--methods", "ar,lvspec-pst", "--scorer", "attention",
                      "--attention-heads", "max")
    assert code == 0, err
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["decode"]["scorer"], cfg["decode"]["attention_heads"], cfg["decode"]["probe"]) == ("attention", "max", None)
    assert json.loads((out / "summary.json").read_text())["config"]["decode"]["scorer"] == "attention"
    assert {r["method"] for r in read_jsonl(out / "records.jsonl")} == {"ar", "lvspec-pst"}

    code, err = _eval(capfd, synthvid, out, "--methods", "ar,lvspec-pst")  # the default scorer is cosine
    assert code == 2 and "scorer: 'attention' -> 'cosine'" in _one_line(err)


def test_eval_bad_scorer_options_are_one_line(capfd, synthvid, tmp_path):
    code, err = _eval(capfd, synthvid, tmp_path / "x", "--scorer", "entropy")
    assert code == 2 and "unknown --scorer 'entropy'" in _one_line(err)
    code, err = _eval(capfd, synthvid, tmp_path / "x", "--methods", "ar,lvspec", "--scorer", "attention",
                      "--engine", "fast")
    assert code == 2 and "--engine eager" in _one_line(err)
    assert not (tmp_path / "x").exists()
    EvalConfig.from_flags(benchmark="b", out="x", methods="ar,sd", scorer="attention", engine="fast")  # no scorer used: fine


def test_runs_recorded_before_the_scorer_option_resume_as_cosine(tmp_path):
    from vidspec.decoding.verifiers.relevance import AttentionMassScorer, CosineTopNScorer

    cfg = EvalConfig.from_flags(benchmark="synthvid_captions", out=str(tmp_path), methods="ar,lvspec")
    old = cfg.flat()
    del old["scorer"], old["attention_heads"], old["probe"]
    (tmp_path / "config.json").write_text(json.dumps(old))
    runner_mod._check_resume(tmp_path, cfg)  # no error
    attention = EvalConfig.from_flags(**{**cfg.to_dict(), "scorer": "attention"})
    with pytest.raises(ConfigError, match="scorer"):
        runner_mod._check_resume(tmp_path, attention)

    from vidspec.decoding.models import load_target

    models = EvalModels(target=load_target("tiny-llava-ov"), draft=load_target("tiny-llava-ov-draft"))
    assert isinstance(build_decoders(cfg, models)["lvspec"].verifier.scorer, CosineTopNScorer)
    assert isinstance(build_decoders(attention, models)["lvspec"].verifier.scorer, AttentionMassScorer)
