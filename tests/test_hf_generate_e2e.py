"""benchmarks/hf_generate_e2e.py (end to end vs transformers' generate) at toy size on CPU."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_hf_generate_e2e_smoke(testbed_benchmark):
    """The committed release target on two fresh SynthVid videos: our AR and strict Sparrow emit
    exactly transformers' own greedy tokens, and the JSON has the three decoders' rates."""
    doc, out, stdout = testbed_benchmark("hf_generate_e2e.py", "hf_generate_e2e.json",
        "--max-new-tokens", "24", seed=4)
    res = doc["results"]
    assert doc["samples"] == 2 and set(res) == {"hf-generate", "ar", "sparrow"}
    assert res["ar"]["identical_to_hf_generate"] == 1.0 and res["sparrow"]["identical_to_hf_generate"] == 1.0
    assert res["hf-generate"]["tokens"] == res["ar"]["tokens"] > 0 and res["hf-generate"]["ratio_to_hf_generate"] == 1.0
    assert "| sparrow |" in stdout
