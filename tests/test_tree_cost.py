"""benchmarks/tree_cost_7b.py (the cost side of Sparrow trees at 7B shapes) at toy size on CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_tree_cost_smoke(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "tree_cost_7b.py"), "--smoke", "--trees", "12-3-4", "--chains", "2,4",
         "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    doc = json.loads((tmp_path / "tree_cost_7b_smoke.json").read_text())
    (costs,) = doc["costs"]
    assert set(costs["chain"]) == {"2", "4"} and costs["ar_ms"] > 0
    tree = costs["tree"]["12-3-4"]
    assert tree["nodes"] == 13 and tree["verify_ms"] > 0 and tree["eager_draft_ms"] > 0 and tree["fast_draft_ms"] > 0
    rows = {r["decoder"]: r for r in doc["rows"]}
    assert rows["chain K=4"]["tau_testbed"] > 1 and rows["chain K=4"]["dsr_projected"] > 0
    assert rows["tree 12-3-4 (fast draft)"]["note"] == "measured"
    assert rows["chain K=2"]["tau_testbed"] is None  # no testbed tau for K = 2: no projection
    assert "machine" in doc and doc["args"]["smoke"] is True


def test_bad_tree_spec_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "tree_cost_7b.py"), "--smoke", "--trees", "48-8",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode != 0 and "bad tree '48-8'" in proc.stderr and "Traceback" not in proc.stderr
