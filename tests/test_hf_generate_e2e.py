"""benchmarks/hf_generate_e2e.py (end to end vs transformers' generate) at toy size on CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_hf_generate_e2e_smoke(tmp_path):
    """The committed release target on two fresh SynthVid videos: our AR and strict Sparrow emit
    exactly transformers' own greedy tokens, and the JSON has the three decoders' rates."""
    from vidspec.evaluation.synthvid import SynthVidConfig, generate_synthvid

    data = generate_synthvid(tmp_path / "sv", SynthVidConfig(num_videos=2, seed=4, preset="easy", frames=8, size="64x64",
                                                            split="validation", styles="alpha"), progress=False)
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "hf_generate_e2e.py"), "--data", str(data), "--limit", "2",
         "--max-new-tokens", "24", "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    doc = json.loads((out / "hf_generate_e2e.json").read_text())
    res = doc["results"]
    assert doc["samples"] == 2 and set(res) == {"hf-generate", "ar", "sparrow"}
    assert res["ar"]["identical_to_hf_generate"] == 1.0 and res["sparrow"]["identical_to_hf_generate"] == 1.0
    assert res["hf-generate"]["tokens"] == res["ar"]["tokens"] > 0 and res["hf-generate"]["ratio_to_hf_generate"] == 1.0
    assert "| sparrow |" in proc.stdout
