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


def test_loss_shape_learning_rate_share_and_loss_by_batch_size(tmp_path, capsys):
    # 20 steps: loss 20 - step; LR up to 1.0 at step 5, then 0.5; batches of 16 clips on odd steps, 2 on even.
    rows = [{"step": i, "time": float(i), "train/loss": 20.0 - i, "train/lr": min(i, 5) / 5 if i <= 5 else 0.5,
             "train/samples": 16 if i % 2 else 2} for i in range(1, 21)]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = summarize(path)
    assert s["loss_by_tenth"] == [18.5, 16.5, 14.5, 12.5, 10.5, 8.5, 6.5, 4.5, 2.5, 0.5]
    assert s["first_losses"] == [19.0, 18.0, 17.0, 16.0, 15.0] and s["final_lr_share"] == 0.5
    # the second half is steps 11-20: odd steps 11..19 (16 clips), even 12..20 (2 clips)
    assert s["second_half_loss_by_batch_clips"] == {"2": {"steps": 5, "loss": 4.0}, "16": {"steps": 5, "loss": 5.0}}
    assert main([str(path)]) == 0
    assert "| 50% | 2: 4.000 (5), 16: 5.000 (5) |" in capsys.readouterr().out
