"""benchmarks/repeat_frames_speed.py: both ways of building a length-augmented sample give the same inputs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from repeat_frames_speed import main  # noqa: E402


@pytest.mark.parametrize("target", ["tiny-llava-ov", "tiny-qwen2.5-vl"])
def test_both_ways_agree_and_are_timed(tmp_path, target):
    out = tmp_path / "speed.json"
    assert main(["--target", target, "--factors", "2,3", "--reps", "1", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [r["frames"] for r in doc["rows"]] == [16, 24] and all(r["same_inputs"] for r in doc["rows"])
    assert all(r["repeated_clip_ms"] > 0 and r["repeated_visual_inputs_ms"] > 0 for r in doc["rows"])
    assert doc["machine"]["device"] == "cpu"
