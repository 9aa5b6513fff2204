"""benchmarks/train_run_summary.py: steps, final loss and median step time of runs from their metrics files."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from train_run_summary import main, summarize  # noqa: E402


def test_median_step_time_and_last_values_plain_and_gzipped(tmp_path, capsys):
    rows = [{"step": 0, "time": 100.0, "train/lr": 0.1},  # not a training row
            {"step": 1, "time": 100.0, "train/loss": 3.0},
            {"step": 2, "time": 110.0, "train/loss": 2.0},  # a 10 s pause (compilation): the median leaves it out
            {"step": 3, "time": 110.5, "train/loss": 1.5},
            {"step": 4, "time": 111.0, "train/loss": 1.0, "train/sim_accept_len": 3.5},
            {"step": 4, "val/loss": 1.2}]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    plain, packed = tmp_path / "metrics.jsonl", tmp_path / "metrics.jsonl.gz"
    plain.write_text(text)
    packed.write_bytes(gzip.compress(text.encode()))
    for p in (plain, packed):
        s = summarize(p)
        assert (s["steps"], s["seconds_per_step"], s["final_loss"], s["final_sim_accept_len"]) == (4, 0.5, 1.0, 3.5)
    assert main([str(plain), "--out", str(tmp_path / "out.json")]) == 0
    assert "| 4 | 0.500 | 1.000 | 3.50 |" in capsys.readouterr().out
    assert json.loads((tmp_path / "out.json").read_text())["runs"][0]["steps"] == 4
