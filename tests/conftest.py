"""Shared fixtures of the repository-level tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def testbed_benchmark(tmp_path):
    """Run a testbed benchmark script on two fresh SynthVid captions with the committed releases.

    ``run(script, result, *args, seed=3)`` generates two easy 8-frame 64x64 validation videos (style
    alpha, SynthVid seed ``seed``), runs ``benchmarks/<script> --data DATA --limit 2 --out OUT *args``
    on one CPU thread, asserts it exits 0, and returns ``(parsed OUT/<result>, OUT, its stdout)``.
    """
    from vidspec.evaluation.synthvid import SynthVidConfig, generate_synthvid

    def run(script: str, result: str, *args: str, seed: int = 3) -> tuple[dict, Path, str]:
        data = generate_synthvid(tmp_path / "sv", SynthVidConfig(num_videos=2, seed=seed, preset="easy", frames=8,
                                                                size="64x64", split="validation", styles="alpha"),
                                 progress=False)
        out = tmp_path / "out"
        proc = subprocess.run(
            [sys.executable, str(REPO / "benchmarks" / script), "--data", str(data), "--limit", "2", *args,
             "--out", str(out)],
            capture_output=True, text=True, timeout=600, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        return json.loads((out / result).read_text()), out, proc.stdout

    return run
