"""The training loader's cost of one length-augmented sample: its repeated clip processed frame by frame, against
the adapter's ``repeated_visual_inputs`` (LLaVA-OneVision processes the clip's frames once and repeats the tensor).

Times ``build_prompt`` for an 8-frame 64x64 clip repeated by each factor, both ways (median of ``--reps``), and
checks that both give the same ids and pixels.

    python benchmarks/repeat_frames_speed.py --target data/releases/synthvid-target --factors 64,192 \\
        --out benchmarks/results/gpu_session22/cpu/repeat_frames_speed.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from vidspec.decoding.models import load_target
from vidspec.decoding.types import Request, VideoClip
from vidspec.evaluation.runner import machine_info


def timed(reps: int, fn, *args) -> tuple[float, object]:
    """Median seconds of ``reps`` calls of ``fn(*args)``, and its last result."""
    times, out = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn(*args)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def shortcut(target, request: Request, clip: VideoClip, factor: int):
    """The loader's way: the adapter's repeated visual inputs of ``clip``, placed in ``request``'s prompt."""
    return target.build_prompt(request, visual=target.repeated_visual_inputs(clip, factor))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="data/releases/synthvid-target")
    ap.add_argument("--frames", type=int, default=8, help="frames of the clip before repeating")
    ap.add_argument("--factors", default="64,192")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    target = load_target(args.target)
    rng = np.random.default_rng(0)
    clip = VideoClip(frames=rng.integers(0, 255, (args.frames, 64, 64, 3), dtype=np.uint8), fps=4.0, source="memory")
    rows = []
    for factor in (int(f) for f in args.factors.split(",")):
        long_clip = clip.repeat_frames(factor)
        request = Request(prompt="Describe the video.", clip=long_clip)
        full_s, (ids, visual) = timed(args.reps, target.build_prompt, request)
        short_s, (ids2, visual2) = timed(args.reps, shortcut, target, request, clip, factor)
        same = torch.equal(ids, ids2) and all(torch.equal(visual.tensors[k], visual2.tensors[k]) for k in visual.tensors)
        rows.append({"factor": factor, "frames": long_clip.num_frames, "repeated_clip_ms": 1000 * full_s,
                     "repeated_visual_inputs_ms": 1000 * short_s, "same_inputs": same})
        print(f"{target.family}, {long_clip.num_frames} frames ({args.frames} x {factor}): the repeated clip "
              f"{1000 * full_s:.0f} ms, repeated_visual_inputs {1000 * short_s:.0f} ms, same inputs: {same}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"target": args.target, "family": target.family, "reps": args.reps,
                                        "rows": rows, "machine": machine_info("cpu")}, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0 if all(r["same_inputs"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
