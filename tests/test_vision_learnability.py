"""benchmarks/vision_learnability.py: the scenes a tower pretrains on do not depend on how many processes render them."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from vision_learnability import make_data  # noqa: E402


def test_rendering_workers_change_nothing_but_time() -> None:
    one = make_data(9, 3, "easy", 32)
    two = make_data(9, 3, "easy", 32, workers=2)
    for a, b in zip(one[:3], two[:3]):
        assert torch.equal(a, b)
    assert one[3] == two[3]
    first, last, labels, classes = one
    assert first.shape == last.shape == (9, 3, 32, 32)
    assert not torch.equal(first, last)  # the objects move between the first and the last frame
    assert labels.shape == (9, 3) and all(int(labels[:, i].max()) < classes[i] for i in range(3))
