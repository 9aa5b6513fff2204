"""SynthVid's ReverseTime and TimeCrop transforms in the training DataModule, on a real SynthVid set: reversed
examples carry the reversed frames and the answer for them; cropped ones a run of the frames and the same answer."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch


@pytest.fixture(scope="module")
def synthvid(tmp_path_factory):
    from vidspec.evaluation.synthvid import SynthVidConfig, generate_synthvid

    return generate_synthvid(tmp_path_factory.mktemp("rev") / "sv",
                             SynthVidConfig(num_videos=8, seed=5, preset="easy", frames=8, size="64x64",
                                            split="train", styles="alpha"), progress=False)


def _dm(data, module, reverse=0.0, crop=0.0):
    from vidspec.draft_training.data import VideoTextDataModule
    from vidspec.evaluation.synthvid.augment import ReverseTime, TimeCrop

    transforms = ([TimeCrop(chance=crop, min_frames=4)] if crop else []) + ([ReverseTime(chance=reverse)] if reverse
                                                                            else [])
    dm = VideoTextDataModule(str(data), tables=[".", "mcq", "openqa"], batch_size=2, shuffle=False, val_split=None,
                             transforms=transforms)
    dm.attach(module.input_spec())
    dm.setup("fit")
    return dm


def _qwen(synthvid):
    from vidspec.draft_training.sft import VLMSFTModule
    from vidspec.draft_training.testbed.arch import ArchConfig
    from vidspec.draft_training.testing import ARCH, QWEN_OPTIONS

    return VLMSFTModule(tokenizer=str(synthvid / "tokenizer"),
                        arch=ArchConfig(**{**ARCH["qwen2.5-vl"], "patch_size": 8}), max_frames=8,
                        adapter_options={**QWEN_OPTIONS, "min_pixels": 4096, "max_pixels": 4096,
                                         "frame_per_patch": True})


def test_reversed_examples_hold_the_reversed_frames_and_answer(synthvid):
    m = _qwen(synthvid)
    plain, rev = _dm(synthvid, m), _dm(synthvid, m, reverse=1.0)
    rows = rev.train_set.rows
    assert [r.answer for r in rows] == [r.answer for r in plain.train_set.rows]
    assert all(r.notes == () for r in plain.train_set.rows)  # only computed when asked for
    reversed_answers = [r.notes[0]["reversed_answer"] if r.notes[0] else None for r in rows]
    tok = m.tokenizer
    kinds, swapped = set(), 0
    for i, (row, reversed_answer) in enumerate(zip(rows, reversed_answers)):
        a, b = plain.train_set[i], rev.train_set[i]
        answer_ids = b["labels"][b["labels"] != -100][:-1]  # without <|im_end|>
        if reversed_answer is None:
            assert torch.equal(a["input_ids"], b["input_ids"])
            assert torch.equal(a["pixel_values_videos"], b["pixel_values_videos"])
            continue
        kinds.add(row.kind or ("caption" if row.prompt.startswith("Describe") else "open"))
        assert tok.decode(answer_ids) == reversed_answer
        swapped += reversed_answer != row.answer
        # the same pixels as the adapter makes of the frames in reverse order
        target = m.as_target()
        clip = target.read_video(row.video)
        frames = np.ascontiguousarray(clip.frames[::-1])
        want = target.visual_inputs(replace(clip, frames=frames)).tensors["pixel_values_videos"]
        torch.testing.assert_close(b["pixel_values_videos"], want.to(b["pixel_values_videos"].dtype))
    assert swapped > 0 and {"caption", "motion"} <= kinds
    # the reversed caption of a one-object scene names the opposite motion of the scene's facts
    from datasets import load_from_disk

    table = load_from_disk(str(synthvid))["train"]
    opposite = {"left": "right", "right": "left", "up": "down", "down": "up", "still": "still"}
    checked = 0
    captions = [a for r, a in zip(rows, reversed_answers) if not r.kind and r.prompt.startswith("Describe")]
    for r, reversed_answer in zip(table, captions):
        objs = json.loads(r["facts"])["objects"]
        if reversed_answer is None or len(objs) != 1:
            continue
        said = [p for p, lab in zip(r["pieces"], r["labels"]) if lab == "motion"]
        reversed_pieces = [w for w in reversed_answer.split() if w.strip(".,") in opposite]
        assert said and said[0].strip() == objs[0]["motion"]
        assert opposite[objs[0]["motion"]] in [w.strip(".,") for w in reversed_pieces]
        checked += 1
    assert checked > 0


def test_cropped_examples_hold_a_run_of_the_frames_and_the_same_answer(synthvid):
    m = _qwen(synthvid)
    plain, crop = _dm(synthvid, m), _dm(synthvid, m, crop=1.0)
    target = m.as_target()
    lengths = []
    for i, row in enumerate(crop.train_set.rows):
        a, b = plain.train_set[i], crop.train_set[i]
        assert torch.equal(a["labels"][a["labels"] != -100], b["labels"][b["labels"] != -100])  # the same answer
        if row.notes[0] is None:  # not a plain scene: left alone
            assert torch.equal(a["pixel_values_videos"], b["pixel_values_videos"])
            continue
        n = int(b["video_grid_thw"][0, 0])  # one frame a patch: the run's length
        lengths.append(n)
        assert 4 <= n <= 8
        clip = target.read_video(row.video)
        runs = [target.visual_inputs(replace(clip, frames=clip.frames[s:s + n], timestamps=()))
                .tensors["pixel_values_videos"] for s in range(clip.num_frames - n + 1)]
        assert any(torch.equal(b["pixel_values_videos"], r.to(b["pixel_values_videos"].dtype)) for r in runs)
    assert lengths and min(lengths) < 8  # some examples are cut


def test_a_batch_of_runs_of_different_lengths_trains(synthvid):
    m = _qwen(synthvid)
    dm = _dm(synthvid, m, reverse=0.5, crop=1.0)
    samples = [dm.train_set[i] for i in range(len(dm.train_set.rows)) if dm.train_set.rows[i].notes[0] is not None][:6]
    batch = dm.collator()(samples)
    assert len(set(batch["video_grid_thw"][:, 0].tolist())) > 1  # clips of different lengths in one batch
    loss = m.training_step(batch, 0)
    loss.backward()
    assert torch.isfinite(loss) and all(p.grad is None or torch.isfinite(p.grad).all() for p in m.parameters())


def test_a_recipe_selects_the_transforms_by_class_path():
    from pathlib import Path

    from vidspec.draft_training.cli import parse_recipe

    recipe = Path(__file__).resolve().parents[1] / "configs" / "train" / "synthvid-target-cpu.yaml"
    cfg = parse_recipe(str(recipe), overrides=[
        "--data.transforms+=vidspec.evaluation.synthvid.augment.TimeCrop", "--data.transforms.min_frames=5",
        "--data.transforms+=vidspec.evaluation.synthvid.augment.ReverseTime", "--data.transforms.chance=0.25"])
    got = [(t.class_path.rsplit(".", 1)[1], dict(vars(t.init_args))) for t in cfg["fit.data.transforms"]]
    assert got == [("TimeCrop", {"chance": 0.5, "min_frames": 5}), ("ReverseTime", {"chance": 0.25})]
