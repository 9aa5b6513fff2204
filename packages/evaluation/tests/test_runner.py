"""The side-by-side runner on tiny models: records, losslessness, speedups, summary, resume rules."""

from __future__ import annotations

import json
import typing

import pytest

from vidspec.decoding.errors import ConfigError
from vidspec.decoding.methods import METHODS
from vidspec.evaluation import runner as runner_mod
from vidspec.evaluation.records import JsonlLog, SampleRecord, read_jsonl, speedups, summarize
from vidspec.evaluation.runner import EvalConfig, run_eval


@pytest.fixture(scope="module")
def run(synthvid, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    cfg = EvalConfig.from_flags(benchmark="synthvid_captions", data=str(synthvid), out=str(out), sparrow="random",
                     max_new_tokens=10, progress=False)
    return cfg, run_eval(cfg)


def test_every_sample_and_method_recorded_with_the_schema(run):
    cfg, summary = run
    records = read_jsonl(f"{cfg.out}/records.jsonl")
    assert len(records) == 2 * len(METHODS)
    assert {(r["sample_id"], r["method"]) for r in records} == {
        (s, m) for s in {r["sample_id"] for r in records} for m in METHODS}
    for r in records:
        hints = set(typing.get_type_hints(SampleRecord))
        # Every field but the benchmark-dependent ones (a scoring protocol's scorer, categories) and the
        # adaptation's (only where a policy adapted) is always there.
        optional = {"scorer", "categories", "k_history", "drafting_stopped_at", "loose_stopped_at", "loose_rounds",
                    "loose_helped_rounds"}
        assert hints - optional <= set(r) <= hints, "records follow the TypedDict"
        if r["method"] in ("lvspec", "lvspec-pst", "fly", "sparrow-lvspec-pst") and r["target_passes"] > 1:
            assert r["loose_rounds"] >= r["loose_helped_rounds"] >= 0 and "loose_stopped_at" in r  # the switch
        assert r["num_new_tokens"] == len(r["token_ids"]) >= 1
        assert r["wall_s"] >= r["prefill_s"] + r["decode_s"] > 0
        assert r["fact_precision"] is not None and r["metric"] == "synthvid_facts"
        # each target pass in order: [drafted, accepted, emitted], adding up to the record's totals
        rounds = r["rounds"]
        assert len(rounds) == r["target_passes"] and all(len(x) == 3 for x in rounds)
        assert sum(x[0] for x in rounds) == r["drafted"] and sum(x[1] for x in rounds) == r["accepted"]
        assert sum(x[2] for x in rounds) == r["num_new_tokens"] - 1  # the first token is the prefill's
    # AR comes first for each sample: every other record was measured against it.
    first = {}
    for r in records:
        first.setdefault(r["sample_id"], r["method"])
    assert set(first.values()) == {"ar"}


def test_strict_methods_are_token_identical_to_ar(run):
    cfg, summary = run
    for r in read_jsonl(f"{cfg.out}/records.jsonl"):
        if r["method"] in ("ar", "sd", "sparrow"):
            assert r["token_identical_to_ar"], r["method"]
        if r["method"] == "ar":
            assert r["tau"] == 1.0 and r["dsr"] == 1.0 and r["esr"] == 1.0
    for m in ("ar", "sd", "sparrow"):
        assert summary["methods"][m]["token_identical_share"] == 1.0
    # Loose methods accept mismatches, so their τ cannot fall below strict SD's with the same draft.
    assert summary["methods"]["lvspec"]["tau"] >= summary["methods"]["sd"]["tau"]


def test_summary_has_provenance_and_conventions(run):
    cfg, summary = run
    on_disk = json.loads(open(f"{cfg.out}/summary.json").read())
    assert on_disk["methods"].keys() == set(METHODS)
    assert "DSR" in on_disk["conventions"] and "ESR" in on_disk["conventions"]
    assert on_disk["machine"]["cpu_count"] and on_disk["machine"]["torch"]
    assert "torch" in on_disk["versions"] and "vidspec-evaluation" in on_disk["versions"]
    assert "sha" in on_disk["git"]
    assert on_disk["config"]["methods"][0] == "ar"


def test_rerun_decodes_nothing_and_other_config_is_refused(run, no_decoding):
    cfg, _ = run
    again = run_eval(cfg)
    assert len(read_jsonl(f"{cfg.out}/records.jsonl")) == 2 * len(METHODS)
    assert again["methods"].keys() == set(METHODS)
    with pytest.raises(ConfigError, match="another config"):
        run_eval(EvalConfig.from_flags(**{**cfg.to_dict(), "methods": cfg.methods, "max_new_tokens": 11}))


def test_config_validation():
    with pytest.raises(ConfigError, match="unknown method"):
        EvalConfig.from_flags(benchmark="synthvid_captions", out="x", methods=("ar", "nope"))
    with pytest.raises(ConfigError, match="--sparrow"):
        EvalConfig.from_flags(benchmark="synthvid_captions", out="x", methods=("sparrow",))
    assert EvalConfig.from_flags(benchmark="b", out="x", methods="sd,ar").methods == ("ar", "sd")


def test_jsonl_log_drops_a_torn_last_line(tmp_path):
    path = tmp_path / "r.jsonl"
    with JsonlLog(path) as log:
        log.append({"schema": 1, "sample_id": "a", "method": "ar", "x": 1})
        with pytest.raises(ValueError):
            log.append({"schema": 1, "sample_id": "a", "method": "ar", "x": 2})
    with open(path, "ab") as fh:
        fh.write(b'{"schema": 1, "sample_id": "b", "meth')
    with JsonlLog(path) as log:
        assert log.dropped_partial and len(log) == 1
        log.append({"schema": 1, "sample_id": "b", "method": "ar", "x": 3})
    assert [r["sample_id"] for r in read_jsonl(path)] == ["a", "b"]


def _rec(method, n, decode_s, wall_s, tau=1.0, score=None):
    return {"sample_id": "s", "method": method, "num_new_tokens": n, "decode_s": decode_s, "wall_s": wall_s,
            "tau": tau, "target_passes": n - 1, "acceptance_by_position": [], "token_identical_to_ar": True,
            "metric": "synthvid_facts", "score": score, "correct": None, "fact_precision": None,
            "fact_recall": None, "fact_hallucinations": None, "loose_accepted": 0, "shift_accepted": 0}


def test_speedups_are_per_token():
    ar = _rec("ar", 11, decode_s=2.0, wall_s=3.0)
    # Half the time per decoded token but twice the tokens: DSR 2 even though total time is equal.
    m = _rec("lvspec", 21, decode_s=2.0, wall_s=3.0)
    dsr, esr = speedups(m, ar)
    assert dsr == pytest.approx(2.0)
    assert esr == pytest.approx((3.0 / 11) / (3.0 / 21))
    s = summarize([ar | {"score": 0.5}, m | {"score": 0.4}])
    assert s["lvspec"]["retention"] == pytest.approx(0.8)


class _Canned:
    """A judge model that always gives 4 (the server and client are real; the model is not needed)."""

    name = "canned"

    def complete(self, messages, max_tokens):
        return '{"score": 4}'


def test_gpt_judge_phase_is_resumable_and_never_scores_unparsable(run, synthvid, monkeypatch):
    from dataclasses import replace

    from vidspec.evaluation.benchmarks import load_benchmark
    from vidspec.evaluation.testing.server import ChatCompletionsServer

    cfg, _ = run
    samples = load_benchmark("synthvid_captions", synthvid)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with ChatCompletionsServer(_Canned()) as server:
        jcfg = replace(cfg, judge=True, judge_base_url=server.base_url, judge_model="canned")
        server.inject("unparsable", times=1)
        runner_mod.judge_run(jcfg, runner_mod.Path(cfg.out), samples)
        asked = server.request_count
        # Identical outputs (strict methods repeat AR) are answered from the verdict cache.
        assert 2 <= asked <= 2 * len(METHODS)
        runner_mod.judge_run(replace(jcfg, judge_keep_unparsable=True), runner_mod.Path(cfg.out), samples)
        assert server.request_count == asked, "nothing is judged twice"
    judged = read_jsonl(f"{cfg.out}/judgements.jsonl")
    assert len(judged) == 2 * len(METHODS)
    bad = [j for j in judged if j["judge_status"] != "ok"]
    assert bad and all(j["judge_score"] is None for j in bad)
    summary = runner_mod.write_summary(runner_mod.Path(cfg.out), cfg, "synthvid_captions")
    assert sum(m["judge_unparsable"] for m in summary["methods"].values()) == len(bad)
    assert {m["judge_score"] for m in summary["methods"].values()} <= {4.0, None}
    # A rerun that does not keep them asks about the unparsable verdicts again (one distinct question).
    with ChatCompletionsServer(_Canned()) as server:
        runner_mod.judge_run(replace(jcfg, judge_base_url=server.base_url), runner_mod.Path(cfg.out), samples)
        assert server.request_count == 1
    judged = read_jsonl(f"{cfg.out}/judgements.jsonl")
    assert len(judged) == 2 * len(METHODS) and all(j["judge_status"] == "ok" for j in judged)


def test_out_that_is_a_file_is_a_user_error(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="--out"):
        run_eval(EvalConfig.from_flags(benchmark="synthvid_captions", out=str(tmp_path / "f"), methods="ar", progress=False))


def test_predicate_options_reach_the_verifier(synthvid, tmp_path):
    """--predicate prob --eps reach LVSpec: with eps 1.0 no loose mismatch passes, with predicate
    always (the same λ) some do; eps is recorded, and resuming with another eps is refused."""
    def go(out, **kw):
        cfg = EvalConfig.from_flags(benchmark="synthvid_captions", data=str(synthvid), out=str(tmp_path / out),
                         methods=("lvspec",), max_new_tokens=12, lam=1.0, progress=False, warmup=False, **kw)
        run_eval(cfg)
        return cfg, [r for r in read_jsonl(f"{cfg.out}/records.jsonl") if r["method"] == "lvspec"]

    cfg, strictish = go("prob", predicate="prob", eps=1.0)
    assert sum(r["loose_accepted"] for r in strictish) == 0
    assert json.loads(open(f"{cfg.out}/config.json").read())["decode"]["eps"] == 1.0
    _, loose = go("always", predicate="always")
    assert sum(r["loose_accepted"] for r in loose) > 0
    with pytest.raises(ConfigError, match="another config"):
        run_eval(EvalConfig.from_flags(**{**cfg.to_dict(), "methods": cfg.methods, "eps": 0.5}))


def test_stage_timings_are_logged(synthvid, tmp_path, caplog):
    """At INFO (VIDSPEC_LOG_LEVEL=INFO) the runner says where its time goes: loading, each method's
    warm-up and graph capture, and every timed decode, so a run cut by a time limit shows its stage."""
    import logging

    cfg = EvalConfig.from_flags(benchmark="synthvid_captions", data=str(synthvid), out=str(tmp_path / "r"), methods=("ar",),
                     limit=2, max_new_tokens=4, progress=False)
    with caplog.at_level(logging.INFO, logger="vidspec.evaluation.runner"):
        run_eval(cfg)
    text = caplog.text
    assert "models loaded and decoders built" in text
    assert "ar warm-up decode" in text
    assert text.count(" ar: ") == 2 and "tokens, video" in text
