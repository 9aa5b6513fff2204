"""benchmarks/sparrow_step_profile.py: a Sparrow distillation step's parts timed on real length-augmented batches."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from sparrow_step_profile import PARTS, main, parse_shapes  # noqa: E402


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    from vidspec.draft_training.testing import write_tiny_dataset

    return write_tiny_dataset(tmp_path_factory.mktemp("data"))


@pytest.mark.parametrize("target", ["tiny-llava-ov", "tiny-qwen2.5-vl"])
def test_parts_are_timed_on_longer_batches_for_larger_repeats(tmp_path, dataset, target, capsys):
    out = tmp_path / "profile.json"
    assert main(["--target", target, "--data", str(dataset), "--shapes", "1x2,2x2", "--steps", "1",
                 "--device", "cpu", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    one, two = doc["rows"]
    assert (one["repeat"], one["clips"], two["repeat"]) == (1, 2, 2)
    assert two["tokens_per_batch"] > one["tokens_per_batch"]  # the repeat reached the batches
    for row in doc["rows"]:
        timed = {p: s for p, s in row["seconds"].items() if s is not None}
        assert set(row["seconds"]) == set(PARTS) and all(s > 0 for s in timed.values())
        assert ("vision" in timed) == ("vision_every_frame" in timed) == (target == "tiny-llava-ov")  # LLaVA-OV's
    assert doc["machine"]["device"] == "cpu" and "| 2 x 2 |" in capsys.readouterr().out
    assert doc["options"]["draft"]["ivsb"] is False  # the recipe's draft, as the headline trains it


def test_bad_shapes_are_refused():
    assert parse_shapes("1x16, 192x2") == [(1, 16), (192, 2)]
    for bad in ("192", "0x2", "ax2"):
        with pytest.raises(SystemExit, match="REPEATxCLIPS"):
            parse_shapes(bad)
