"""benchmarks/sparrow_tree_cpu.py (chain vs tree Sparrow τ) at toy size on CPU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))


def test_tree_specs():
    from sparrow_tree_cpu import parse_tree

    assert parse_tree("30-4-8") == {"total_tokens": 30, "depth": 4, "top_k": 8}
    for bad in ("30-4", "a-b-c", "30-0-8", "1-2-3-4"):
        with pytest.raises(ValueError):
            parse_tree(bad)


def test_benchmark_smoke(testbed_benchmark):
    """Two captions of a fresh SynthVid set, the committed releases, one chain and one tree: the JSON
    is written, every strict method is token-identical to AR, and the table has every method."""
    doc, out, stdout = testbed_benchmark("sparrow_tree_cpu.py", "sparrow_tree_cpu.json",
        "--max-new-tokens", "16", "--ks", "4", "--trees", "8-3-3")
    assert doc["samples"] == 2 and doc["machine"]["cpu_count"] >= 1
    res = doc["results"]
    assert set(res) == {"ar", "chain K=4", "tree 8-3-3"}
    assert all(v["identical_to_ar"] == 1.0 for v in res.values())
    assert res["ar"]["tau"] == 1.0 and res["chain K=4"]["tau"] > 1.0 and res["tree 8-3-3"]["tau"] > 1.0
    assert res["chain K=4"]["target_pass_tokens"] == pytest.approx(5.0, abs=1.0)  # the last round may be shorter
    assert res["tree 8-3-3"]["tree"] == {"total_tokens": 8, "depth": 3, "top_k": 3}
    assert "| tree 8-3-3 |" in stdout
