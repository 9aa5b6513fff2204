"""benchmarks/qwen_vision_train_speed.py: both attention paths timed on the same tower and inputs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from qwen_vision_train_speed import main  # noqa: E402


def test_times_both_paths_and_writes_json(tmp_path):
    out = tmp_path / "speed.json"
    # 160 px frames: 20 patches a side, so 112 px windows leave edge windows of other lengths
    doc = main(["--device", "cpu", "--batch", "1", "--steps", "1", "--hidden", "32", "--heads", "2", "--layers", "2",
                "--size", "160", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(doc))
    assert set(doc["ms_per_step_median"]) == {"per_window", "grouped"}
    assert all(len(v) == 1 and v[0] > 0 for v in doc["ms_per_step"].values())
    assert doc["windows_per_layer"] == 4 * 4 and doc["max_abs_output_difference"] < 1e-5
    assert doc["machine"]["device"] == "cpu" and doc["vision_parameters"] > 0
