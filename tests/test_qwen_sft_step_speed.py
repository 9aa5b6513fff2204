"""benchmarks/qwen_sft_step_speed.py: a whole Qwen2.5-VL SFT step timed three ways on the same weights and batch."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from qwen_sft_step_speed import VARIANTS, main  # noqa: E402

from vidspec.draft_training.testing import write_tiny_dataset  # noqa: E402


def test_times_three_variants_with_the_same_loss(tmp_path):
    data = write_tiny_dataset(tmp_path / "data")
    out = tmp_path / "step.json"
    doc = main(["--data", str(data), "--device", "cpu", "--batch", "2", "--frames", "4", "--steps", "1",
                "--hidden", "32", "--layers", "1", "--heads", "2", "--vision-hidden", "32", "--vision-layers", "1",
                "--vision-heads", "2", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(doc))
    assert set(doc["ms_per_step_median"]) == set(VARIANTS)
    assert all(len(v) == 1 and v[0] > 0 for v in doc["ms_per_step"].values())
    # the three are the same model on the same batch: the changes are in how the step runs, not what it computes
    assert doc["max_abs_loss_difference"] < 1e-5 and doc["batch_tokens"] > 0
    assert doc["machine"]["device"] == "cpu" and doc["speedup_over_transformers"]["transformers"] == 1.0
