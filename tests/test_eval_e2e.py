"""End to end through the CLI as a user runs it: build SynthVid, evaluate methods, report."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def _vidspec(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "vidspec.decoding.cli", *args], capture_output=True, text=True,
                          env=env, timeout=300)


def test_data_eval_report(tmp_path):
    data, out = tmp_path / "sv", tmp_path / "run"
    r = _vidspec("data", "synthvid", "--out", str(data), "--num-videos", "2", "--seed", "3", "--preset", "easy",
                 "--size", "64x64", "--split", "validation", "--no-progress", "true")
    assert r.returncode == 0, r.stderr
    r = _vidspec("eval", "--benchmark", "synthvid_mcq", "--data", str(data), "--out", str(out), "--limit", "2",
                 "--methods", "ar,sd,lvspec-pst,sparrow", "--sparrow", "random", "--max-new-tokens", "6",
                 "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "| sparrow (strict)" in r.stdout and (out / "report.md").is_file()
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["methods"]) == ["ar", "sd", "lvspec-pst", "sparrow"]
    # Multiple choice: accuracy is measured for every method (random models rarely name a letter).
    assert all(m["accuracy"] is not None for m in summary["methods"].values())
    r = _vidspec("report", str(out))
    assert r.returncode == 0 and "## synthvid_mcq" in r.stdout
    # A user error is one line and exit 2, never a traceback.
    r = _vidspec("eval", "--benchmark", "synthvid_mcq", "--data", str(data), "--out", str(out), "--methods", "bogus")
    assert r.returncode == 2 and "unknown method" in r.stderr and "Traceback" not in r.stderr
