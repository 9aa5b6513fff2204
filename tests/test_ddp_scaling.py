"""benchmarks/ddp_scaling.py: throughput from the logged batch sizes (an epoch's short last batch counts as what it is)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from ddp_scaling import throughput  # noqa: E402


def _rows(sizes, dt=1.0):
    return [{"step": i + 1, "time": i * dt, "train/loss": 1.0, "train/samples": float(b)} for i, b in enumerate(sizes)]


def test_logged_batch_sizes_count_short_batches():
    rows = _rows([8, 8, 8, 2, 8, 8, 2])  # two epochs of 18 samples in batches of 8
    tp = throughput(rows, batch=8, devices=2, warmup=1)
    # steps 3..7 after step 2: 8 + 2 + 8 + 8 + 2 = 28 samples per rank, 2 ranks, 5 s
    assert tp["samples_timed"] == 56 and tp["samples_per_s"] == pytest.approx(56 / 5)
    assert tp["samples_from"].startswith("logged")


def test_without_logged_sizes_falls_back_to_batch_times_steps():
    rows = [{k: v for k, v in r.items() if k != "train/samples"} for r in _rows([8] * 6)]
    tp = throughput(rows, batch=8, devices=2, warmup=1)
    assert tp["samples_timed"] == 4 * 8 * 2 and tp["samples_from"].startswith("per-device batch")


def test_too_few_steps_is_a_clear_exit():
    with pytest.raises(SystemExit, match="raise --steps"):
        throughput(_rows([8, 8]), batch=8, devices=1, warmup=1)
