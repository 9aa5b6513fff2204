"""Greedy captions of a target on the long held-out videos at several frame budgets (for reading).

    .venv/bin/python benchmarks/results/long_video_cpu/captions.py TARGET OUT.json [--frames 8,64,256] [--limit 3]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from testbed_common import caption_rows  # noqa: E402


def main() -> None:
    from vidspec.decoding.methods import build_decoder
    from vidspec.decoding.models import load_target
    from vidspec.decoding.types import Request
    from vidspec.decoding.video import read_video
    from vidspec.evaluation.synthvid.judge import judge_caption

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target")
    ap.add_argument("out")
    ap.add_argument("--data", default="data/cache/synthvid-long256")
    ap.add_argument("--frames", default="8,64,256")
    ap.add_argument("--limit", type=int, default=3)
    args = ap.parse_args()
    lengths = [int(x) for x in args.frames.split(",")]
    data = Path(args.data)
    target = load_target(args.target, device="cpu", max_frames=max(lengths))
    ar = build_decoder("ar", target=target)
    out = []
    for r in caption_rows(data, "validation", args.limit, style="alpha"):
        for n in lengths:
            clip = read_video(str(data / r["video"]), max_frames=n, max_pixels=target.max_read_pixels)
            text = ar.generate(Request(r["question"], clip), max_new_tokens=64).text
            j = judge_caption(text, json.loads(r["facts"]))
            out.append({"video": r["video"], "frames": n, "text": text, "claims": len(j.claims),
                        "true": sum(c.true for c in j.claims), "reference": r["answer"]})
            print(f"{n:4d} frames | {len(j.claims)} claims, {sum(c.true for c in j.claims)} true | {text!r}")
    Path(args.out).write_text(json.dumps({"target": args.target, "data": args.data, "captions": out}, indent=1) + "\n")


if __name__ == "__main__":
    main()
