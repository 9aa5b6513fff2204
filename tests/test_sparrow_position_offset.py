"""benchmarks/sparrow_position_offset.py: a Sparrow draft's agreement when only its position ids after the video move."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from sparrow_position_offset import main, measure, shift_after_video, trained_options  # noqa: E402


def test_shift_moves_only_what_follows_each_rows_video():
    ids = torch.tensor([[1, 9, 9, 2, 3], [9, 2, 3, 4, 0], [1, 2, 3, 4, 5]])  # 9: the video token; row 2 has none
    pos = torch.arange(5).expand(3, 5)[None]
    got = shift_after_video(pos, ids, 9, 100)
    assert got[0].tolist() == [[0, 1, 2, 103, 104], [0, 101, 102, 103, 104], [0, 1, 2, 3, 4]]


@pytest.fixture(scope="module")
def batches(tmp_path_factory):
    from vidspec.draft_training.data import VideoTextDataModule
    from vidspec.draft_training.sparrow.module import SparrowDistillModule
    from vidspec.draft_training.testing import write_tiny_dataset

    data = write_tiny_dataset(tmp_path_factory.mktemp("data"))
    spec = SparrowDistillModule(target="tiny-llava-ov").input_spec()
    dm = VideoTextDataModule(path=str(data), tables=["."], caption_styles=["alpha", "beta"], batch_size=2,
                             num_workers=0)
    dm.attach(spec)
    dm.setup("validate")
    return list(dm.val_dataloader())


def test_offset_zero_is_the_clip_and_a_reindexed_draft_ignores_offsets(batches):
    from vidspec.draft_training.sparrow.module import SparrowDistillModule

    torch.manual_seed(0)
    module = SparrowDistillModule(target="tiny-llava-ov", draft={"ivsb": False})  # as the recipes train it
    rows = measure(module, batches, [0, 5000])
    with torch.no_grad():
        _, stats, n = module.step(batches[0])
    assert len(batches) == 1 and rows[0]["answer_tokens"] == n > 0
    assert rows[0]["acc_by_step"] == pytest.approx([float(s["acc"]) for s in stats])
    assert rows[0]["loss_by_step"] != pytest.approx(rows[1]["loss_by_step"])  # the shift reaches the draft
    reindexed = SparrowDistillModule(target="tiny-llava-ov", draft={"ivsb": False, "position_mode": "reindex"})
    same = measure(reindexed, batches, [0, 5000])
    assert same[0]["acc_by_step"] == same[1]["acc_by_step"] and same[0]["loss_by_step"] == same[1]["loss_by_step"]


def test_the_script_runs_on_a_release(tmp_path, batches, capsys):
    from vidspec.decoding.models import load_target
    from vidspec.decoding.sparrow import new_sparrow_for, target_fingerprint
    from vidspec.draft_training.testing import write_tiny_dataset

    target = load_target("tiny-llava-ov")
    release = new_sparrow_for(target, seed=0).save_pretrained(
        tmp_path / "sparrow", manifest={"target_fingerprint": target_fingerprint(target)})
    data = write_tiny_dataset(tmp_path / "data")
    out = tmp_path / "offset.json"
    assert main(["--target", "tiny-llava-ov", "--sparrow", str(release), "--data", str(data), "--offsets", "0,300",
                 "--caption-styles", "alpha,beta", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [r["offset"] for r in doc["rows"]] == [0, 300] and doc["position_mode"] == "target"
    assert "| 300 |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--target", "tiny-llava-ov", "--sparrow", str(release), "--data", str(data), "--offsets", "5,300"])


def test_the_release_runs_with_the_options_it_was_distilled_with(tmp_path):
    release = tmp_path / "release"
    release.mkdir()
    assert trained_options(release) == {"draft": {"ivsb": False}, "loss": None}  # no manifest: no IVSB
    config = {"model": {"init_args": {"draft": {"ivsb": False, "position_mode": "reindex"}, "loss": {"mtp_steps": 4}}}}
    (release / "manifest.json").write_text(json.dumps({"training_config": config}))
    assert trained_options(release) == {"draft": {"ivsb": False, "position_mode": "reindex"}, "loss": {"mtp_steps": 4}}
