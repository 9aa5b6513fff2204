"""``vidspec report``: tables with every method and the conventions, PNG plots, TensorBoard scalars."""

from __future__ import annotations

import json

import pytest

from vidspec.decoding.cli import main
from vidspec.decoding.errors import ConfigError
from vidspec.decoding.methods import METHODS
from vidspec.evaluation.records import SCHEMA_VERSION, JsonlLog
from vidspec.evaluation.report import load_run, markdown_table, write_report


def _record(benchmark, sample, method, tau, decode_s, correct):
    n = 9
    k = 0 if method == "ar" else 4
    return {
        "schema": SCHEMA_VERSION, "benchmark": benchmark, "sample_id": sample, "method": method, "k": k,
        "text": "A", "token_ids": list(range(n)), "num_new_tokens": n, "finish_reason": "length", "tau": tau,
        "target_passes": 8, "drafted": 8 * k, "accepted": 4, "acceptance_by_position": [0.5, 0.3, 0.2, 0.1][:k],
        "loose_accepted": 2 if "lvspec" in method else 0, "shift_accepted": 1 if "pst" in method else 0,
        "video_s": 0.01, "prefill_s": 0.1, "decode_s": decode_s, "wall_s": 0.11 + decode_s, "dsr": None,
        "esr": None, "token_identical_to_ar": method in ("ar", "sd", "sparrow"), "metric": "mcq_accuracy",
        "score": float(correct), "correct": correct, "choice": "A" if correct else "B", "fact_precision": None,
        "fact_recall": None, "fact_hallucinations": None, "hallucinated": [],
    }


def _write_run(path, benchmark, methods=METHODS):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"benchmark": benchmark, "target": "t", "draft": "d"}))
    with JsonlLog(path / "records.jsonl") as log:
        for s in ("s1", "s2", "s3"):
            for i, m in enumerate(methods):
                log.append(_record(benchmark, s, m, tau=1.0 + 0.3 * i, decode_s=1.0 / (1 + 0.3 * i),
                                   correct=not (m == "fly" and s == "s1")))


def test_report_of_two_benchmarks(tmp_path):
    _write_run(tmp_path / "mcq", "synthvid_mcq")
    _write_run(tmp_path / "other", "videomme", methods=("ar", "sd"))
    md = write_report(tmp_path)
    text = md.read_text()
    assert "## synthvid_mcq" in text and "## videomme" in text
    assert "DSR = AR decode" in text and "ESR" in text and "Retention" in text
    table = text.split("## synthvid_mcq")[1].split("## videomme")[0]
    for m in METHODS:
        assert f"| {m}" in table
    for kind in ("pareto", "tau", "acceptance"):
        png = tmp_path / "plots" / f"synthvid_mcq-{kind}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"plots/synthvid_mcq-{kind}.png" in text
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


def test_aggregates_in_the_table(tmp_path):
    _write_run(tmp_path / "r", "synthvid_mcq")
    run = load_run(tmp_path / "r")
    fly = run.methods["fly"]
    assert fly["accuracy"] == pytest.approx(2 / 3)
    assert fly["retention"] == pytest.approx(2 / 3)
    assert run.methods["sd"]["dsr"] == pytest.approx(1.3)
    row = next(line for line in markdown_table(run.methods).splitlines() if line.startswith("| fly"))
    assert "67%" in row


def test_report_cli(tmp_path, capsys):
    _write_run(tmp_path / "r", "synthvid_mcq", methods=("ar", "sd"))
    assert main(["report", str(tmp_path / "r"), "--no-plots", "--no-tensorboard"]) == 0
    assert "| sd (strict)" in capsys.readouterr().out
    assert main(["report", str(tmp_path / "empty")]) == 2


def test_records_of_another_schema_are_a_user_error(tmp_path, capsys):
    run = tmp_path / "old"
    run.mkdir()
    (run / "records.jsonl").write_text(json.dumps({"schema": SCHEMA_VERSION - 1, "sample_id": "a", "method": "ar"}) + "\n")
    assert main(["report", str(run)]) == 2
    assert "schema" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="schema"):
        JsonlLog(run / "records.jsonl")


def test_two_runs_of_one_benchmark_keep_their_own_plots(tmp_path):
    _write_run(tmp_path / "a", "synthvid_mcq")
    _write_run(tmp_path / "b", "synthvid_mcq", methods=("ar", "sd"))
    text = write_report(tmp_path, tensorboard=False).read_text()
    for run in ("a", "b"):
        png = tmp_path / "plots" / f"synthvid_mcq-{run}-pareto.png"
        assert png.is_file() and f"plots/synthvid_mcq-{run}-pareto.png" in text


def test_an_archived_run_with_gzipped_records_is_reported(tmp_path):
    import gzip

    _write_run(tmp_path / "r", "synthvid_mcq", methods=("ar", "sd"))
    plain = load_run(tmp_path / "r")
    raw = (tmp_path / "r" / "records.jsonl").read_bytes()
    (tmp_path / "r" / "records.jsonl.gz").write_bytes(gzip.compress(raw))
    (tmp_path / "r" / "records.jsonl").unlink()
    archived = load_run(tmp_path / "r")
    assert archived.records == plain.records and archived.methods["sd"]["dsr"] == pytest.approx(1.3)
    assert main(["report", str(tmp_path), "--no-tensorboard"]) == 0  # found as a run folder of tmp_path
    assert (tmp_path / "plots" / "synthvid_mcq-pareto.png").is_file()


def test_pareto_plot_with_the_prepare_counted_in_the_decode(tmp_path):
    from vidspec.evaluation.report import plot_run

    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps({"benchmark": "synthvid_mcq"}))
    with JsonlLog(run_dir / "records.jsonl") as log:
        for s in ("s1", "s2"):
            for m, tau, dec, prep in (("ar", 1.0, 1.0, 0.0), ("sparrow", 3.0, 0.25, 0.1)):
                log.append(_record("synthvid_mcq", s, m, tau=tau, decode_s=dec, correct=True) | {"draft_prefill_s": prep})
    run = load_run(run_dir)
    sp = run.methods["sparrow"]
    assert sp["dsr"] == pytest.approx(4.0) and sp["dsr_prepare_in_decode"] == pytest.approx(1.0 / 0.35)
    (png,) = [p for p in plot_run(run, tmp_path / "plots") if p.name.endswith("pareto.png")]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
