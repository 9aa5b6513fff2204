"""The fast Qwen2.5-VL vision path equals HF's vision tower; window plans tile the sequence."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vidspec.decoding.fast import FastQwenVision, FastTarget
from vidspec.decoding.fast.vision import plan_groups, window_plan
from vidspec.decoding.types import Request, VideoClip


def _visual(target, shape, seed=0):
    frames = np.random.default_rng(seed).integers(0, 255, (*shape, 3), dtype=np.uint8)
    vis = target.visual_inputs(VideoClip(frames=frames, fps=2.0, source="memory"))
    return vis.tensors["pixel_values_videos"], vis.tensors["video_grid_thw"]


@pytest.mark.parametrize("shape", [(8, 56, 84), (4, 112, 112), (6, 84, 140)])
def test_vision_matches_hf(tiny, shape):
    """(8, 56, 84): edge windows of two lengths; (4, 112, 112): whole windows only (the reshape path)."""
    target = tiny("tiny-qwen2.5-vl")
    px, grid = _visual(target, shape)
    with torch.no_grad():
        ref = target.model.model.visual(px, grid_thw=grid).pooler_output
    ours = FastQwenVision(target.model.model.visual)(px, grid)
    assert ours.shape == ref.shape
    assert (ours - ref).abs().max() < 1e-5


def test_vision_two_videos_in_one_call(tiny):
    target = tiny("tiny-qwen2.5-vl")
    pa, ga = _visual(target, (8, 56, 84), 1)
    pb, gb = _visual(target, (4, 84, 56), 2)
    px, grid = torch.cat([pa, pb]), torch.cat([ga, gb])
    with torch.no_grad():
        ref = target.model.model.visual(px, grid_thw=grid).pooler_output
    assert (FastQwenVision(target.model.model.visual)(px, grid) - ref).abs().max() < 1e-5


def test_window_plan_tiles_the_sequence():
    grid = [(2, 12, 20), (1, 8, 8)]
    index, windows, frames = window_plan(grid, merge=2, window_units=4)
    units = 2 * 6 * 10 + 16
    assert sorted(index.tolist()) == list(range(units))
    assert sum(windows) == 4 * units and sum(frames) == 4 * units
    # 6 x 10 units in 4 x 4 windows: lengths 16, 16, 8 (right edge), 8, 8, 4 (bottom edge, corner) per frame
    assert sorted({w // 4 for w in windows}) == [4, 8, 16]
    groups = plan_groups(windows, torch.device("cpu"))
    covered = torch.cat([g.index.flatten() for g in groups])
    assert sorted(covered.tolist()) == list(range(4 * units))


def test_fast_target_prefill_with_fast_vision(tiny, clip):
    target = tiny("tiny-qwen2.5-vl")
    fast = FastTarget(target, max_len=512, fast_vision=True)
    assert fast.vision is not None
    req = Request("Describe the video.", clip)
    need = frozenset({"visual", "mid"})
    a, b = target.prefill(req, need), fast.prefill(req, need)
    assert (a.first_logits - b.first_logits).abs().max() < 1e-4
    assert (a.visual_hidden - b.visual_hidden).abs().max() < 1e-4
