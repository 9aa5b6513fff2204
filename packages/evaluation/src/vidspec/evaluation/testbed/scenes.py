"""Scene files for vision-tower pretraining: one-object SynthVid scenes with their exact attribute labels.

A testbed Video-LLM's vision tower is pretrained before the Video-LLM is (``vidspec tower-pretrain`` in the
training package) on the first and last frames of rendered one-object scenes, labelled with the object's shape,
colour and motion. This module draws and renders those scenes and writes them as a safetensors file: ``first``
and ``last`` ``(N, 3, H, W)`` uint8 frames (``(N, 2, 3, H, W)`` frame pairs with ``pairs``, the pairs a Qwen2.5-VL
tower reads), ``labels`` ``(N, 3)`` int64 (shape, colour, motion class), and the metadata ``classes`` (the three
class counts, comma-separated).
"""

from __future__ import annotations

import tempfile
from functools import partial
from pathlib import Path

import numpy as np


def _render_ends(scenes: list, pairs: bool = False, codec: bool = False) -> list:
    """First and last frame of each scene; with ``pairs`` the first and the last frame pair, (f0, f1) and
    (f[T-2], f[T-1]); with ``codec`` through H.264 and back, as a SynthVid mp4 is read."""
    from vidspec.decoding.video import read_video
    from vidspec.evaluation.synthvid.render import encode_mp4, render_frame, render_video

    out = []
    for s in scenes:
        t = s.config.num_frames
        if codec:
            with tempfile.TemporaryDirectory() as tmp:
                encode_mp4(render_video(s), f"{tmp}/clip.mp4", fps=s.config.fps, crf=s.config.crf)
                clip = read_video(f"{tmp}/clip.mp4", max_frames=t).frames
        else:
            clip = {i: render_frame(s, i) for i in (0, 1, t - 2, t - 1)}
        if pairs:
            out.append((np.stack([clip[0], clip[1]]), np.stack([clip[t - 2], clip[t - 1]])))
        else:
            out.append((clip[0], clip[t - 1]))
    return out


def write_scene_file(out: str | Path, n: int, seed: int, preset: str = "easy", size: int = 64, frames: int = 8,
                     pairs: bool = False, codec: bool = False, workers: int = 1) -> Path:
    """Draw ``n`` one-object scenes of ``preset`` (``size`` x ``size``, ``frames`` frames) from ``seed``, render
    their ends and write a scene file (see the module doc) to ``out``.

    The scenes are drawn in this process from one generator, so ``workers`` (processes that render them) changes
    the time taken, never the data. ``codec``: the frames go through H.264 (the world's crf) and vidspec's reader,
    as a target's frames do.
    """
    import torch
    from safetensors.torch import save_file

    from vidspec.evaluation.synthvid.world import COLOURS, sample_scene
    from vidspec.evaluation.synthvid.world import preset as world_preset

    cfg = world_preset(preset, min_objects=1, max_objects=1, width=size, height=size, num_frames=frames, events=(),
                       max_events=0)
    shapes, motions, colours = list(cfg.shapes), list(cfg.motions), list(COLOURS)
    rng = np.random.default_rng(seed)
    scenes = [sample_scene(rng, cfg) for _ in range(n)]
    labels = [(shapes.index(s.objects[0].shape), colours.index(s.objects[0].colour),
               motions.index(s.objects[0].motion)) for s in scenes]
    if workers > 1 and n > 1:
        import multiprocessing as mp

        step = -(-n // (workers * 4))
        with mp.get_context("spawn").Pool(workers) as pool:
            ends = [e for part in pool.map(partial(_render_ends, pairs=pairs, codec=codec),
                                           [scenes[i:i + step] for i in range(0, n, step)]) for e in part]
    else:
        ends = _render_ends(scenes, pairs, codec)

    def channels_first(frames: list) -> torch.Tensor:  # (N, [2,] H, W, 3) -> (N, [2,] 3, H, W)
        return torch.from_numpy(np.stack(frames)).movedim(-1, -3).contiguous()

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.partial")
    save_file({"first": channels_first([e[0] for e in ends]), "last": channels_first([e[1] for e in ends]),
               "labels": torch.tensor(labels, dtype=torch.int64)}, str(tmp),
              metadata={"classes": f"{len(shapes)},{len(colours)},{len(motions)}", "preset": preset,
                        "seed": str(seed)})
    tmp.replace(out)  # a file under its final name is whole
    return out
