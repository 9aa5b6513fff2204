"""benchmarks/loose_predicate.py (the LVSpec acceptance-predicate sweep) at toy size on CPU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))


def test_variant_specs():
    from loose_predicate import parse_variant

    assert parse_variant("always") == ("always", {"lam": 0.7, "predicate": "always"})
    assert parse_variant("prob:0.1@1.0")[1] == {"lam": 1.0, "predicate": "prob", "eps": 0.1}
    assert parse_variant("topk:2")[1] == {"lam": 0.7, "predicate": "topk", "top_k": 2}
    for bad in ("prob", "topk:x", "always:1", "sometimes"):
        with pytest.raises(ValueError):
            parse_variant(bad)


def test_sweep_smoke(testbed_benchmark):
    """Two captions of a fresh SynthVid set, the committed releases, two variants: the JSON and the
    plot are written, strict sparrow is token-identical to AR, and the table has every method."""
    doc, out, stdout = testbed_benchmark("loose_predicate.py", "loose_predicate.json",
        "--max-new-tokens", "24", "--variants", "always,prob:0.1", "--methods", "sparrow-lvspec-pst")
    assert doc["samples"] == 2 and (out / "loose_predicate.png").stat().st_size > 0
    res = doc["results"]
    assert set(res) == {"ar", "sd", "sparrow", "sparrow-lvspec-pst always", "sparrow-lvspec-pst prob:0.1"}
    assert res["sparrow"]["identical_to_ar"] == 1.0 and res["sd"]["identical_to_ar"] == 1.0
    assert res["ar"]["tau"] == 1.0 and res["sparrow"]["tau"] > 1.0
    assert "| sparrow-lvspec-pst prob:0.1 |" in stdout
