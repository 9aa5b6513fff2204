"""benchmarks/long_bar_pooled.py: the long-video bar pooled over retrainings of one recipe."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from long_bar_pooled import main, pooled_ratio  # noqa: E402


def test_pooled_ratio_weights_every_video_alike_and_redraws_within_each_retraining():
    runs = [[(10.0, 9.0), (10.0, 9.0)], [(5.0, 5.0)]]
    out = pooled_ratio(runs, draws=500)
    assert out["ratio"] == pytest.approx(23 / 25) and out["met"] and out["videos"] == 3
    assert [r["ratio"] for r in out["per_retraining"]] == pytest.approx([0.9, 1.0])
    # each retraining's videos are alike, so every stratified draw is the full sample: no spread
    assert out["bootstrap"]["ci95"] == pytest.approx([23 / 25, 23 / 25]) and out["bootstrap"]["share_met"] == 1.0
    spread = pooled_ratio([[(10.0, 4.0), (10.0, 10.0)], [(10.0, 10.0)]], draws=2000)
    lo, hi = spread["bootstrap"]["ci95"]
    assert lo == pytest.approx(18 / 30) and hi == pytest.approx(1.0) and 0 < spread["bootstrap"]["share_met"] < 1


def test_committed_retrainings(tmp_path, capsys):
    res = REPO / "benchmarks" / "results"
    pairs = [f"{d}/eval-long64,{d}/eval-long1536" for d in (res / "gpu_session24/ft2/b", res / "gpu_session25/long")]
    assert main([*pairs, "--out", str(tmp_path / "p.json")]) == 0
    doc = json.loads((tmp_path / "p.json").read_text())
    ratios = [json.loads((res / "gpu_session24/ft2/long_ab_analysis.json").read_text())["b"]["bar"]["ratio"],
              json.loads((res / "gpu_session25/long/long_tau.json").read_text())["bar"]["ratio"]]
    assert [r["ratio"] for r in doc["retrainings"]] == pytest.approx(ratios)
    assert doc["videos"] == 60 and min(ratios) <= doc["ratio"] <= max(ratios)
    assert "pooled over 2 retrainings, 60 videos" in capsys.readouterr().out


def test_a_pair_that_is_not_two_runs_is_a_usage_error(tmp_path, capsys):
    for arg in (str(tmp_path), f"{tmp_path},{tmp_path}"):
        with pytest.raises(SystemExit) as e:
            main([arg])
        assert e.value.code == 2
    assert "not an eval run folder" in capsys.readouterr().err
