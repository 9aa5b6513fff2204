"""Reading the part of a video a sample is about: MovieChat's breakpoint questions, MVBench's segments.

A MovieChat-1K breakpoint question (a row with ``time``, a frame index) asks about the movie up to that
frame, and lmms-eval hands the model the video with that breakpoint; some MVBench sub-tasks give a
``start`` and ``end`` in seconds. Such a sample carries ``extra["clip"]`` (from the row functions):
``{"end_frame": N}`` or ``{"start_s": a, "end_s": b}``. :func:`read_sample_video` samples the target's frame
budget uniformly within that range; samples without a range are read whole, as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vidspec.decoding.types import VideoClip
from vidspec.decoding.video import fit_max_pixels, get_reader, resize_frames, uniform_indices
from vidspec.evaluation.benchmarks.types import Sample


def frame_range(clip: dict[str, Any], num_frames: int, fps: float) -> tuple[int, int]:
    """``(first, last + 1)`` frame indices of a sample's range within a video of ``num_frames`` at ``fps``.

    The range is clamped to the video and never empty (a breakpoint at frame 0 keeps frame 0).
    """
    first, stop = 0, num_frames
    if clip.get("end_frame") is not None:
        stop = int(clip["end_frame"]) + 1
    if clip.get("start_s") is not None and fps > 0:
        first = int(float(clip["start_s"]) * fps)
    if clip.get("end_s") is not None and fps > 0:
        stop = int(round(float(clip["end_s"]) * fps)) + 1
    stop = max(1, min(stop, num_frames))
    first = max(0, min(first, stop - 1))
    return first, stop


def read_sample_video(target: Any, sample: Sample) -> VideoClip:
    """The sample's video as ``target`` reads it, limited to the sample's range when it has one.

    ``target``: an adapter or a FastTarget (read through its adapter); its ``max_frames`` and
    ``max_read_pixels`` apply.
    """
    clip = sample.extra.get("clip")
    if not clip:
        return target.read_video(sample.video_path)
    adapter = getattr(target, "adapter", target)
    max_frames = int(getattr(adapter, "max_frames", 16) or 16)
    max_pixels = getattr(adapter, "max_read_pixels", None)
    reader = get_reader("auto")
    info = reader.probe(sample.video_path)
    first, stop = frame_range(clip, info.num_frames, info.fps)
    indices = first + uniform_indices(stop - first, max_frames)
    frames, timestamps = reader.read(sample.video_path, np.asarray(indices).tolist())
    if max_pixels is not None:
        frames = resize_frames(frames, fit_max_pixels(frames.shape[1], frames.shape[2], max_pixels))
    span = stop - first
    return VideoClip(frames=frames, fps=info.fps * len(indices) / span if span else info.fps,
                     source=f"{sample.video_path} [frames {first}-{stop - 1}]", timestamps=timestamps,
                     source_num_frames=info.num_frames, source_fps=info.fps)
