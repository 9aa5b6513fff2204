"""Session 34: what a target says about a moving object shown standing still at the start or at the end of its path.

For each of the first ``--limit`` validation videos with one object that moves, the target captions three clips:
the video itself, its first frame repeated (the object still where its path starts) and its last frame repeated
(still where its path ends). The motion the caption names is read from its words. A target that compares the frames
says "still" for both still clips. One that reads the place (SynthVid's easy world starts a moving object at the
edge it moves away from, RESULTS 40.3) names the recorded motion for the first frame and the opposite one for the
last frame.

    python benchmarks/results/session34/static_clips.py --data DATA --target T --limit 60 --out F
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/, for testbed_common

_OPPOSITE = {"left": "right", "right": "left", "up": "down", "down": "up"}
_MOTION = re.compile(r"\b(left|right|up|down|still)\b")


def said_motion(text: str) -> str:
    """The motion a one-object caption names: its first motion word, or "none"."""
    m = _MOTION.search(text.lower())
    return m.group(1) if m else "none"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--split", default="validation")
    ap.add_argument("--limit", type=int, default=60, help="moving one-object videos")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    from testbed_common import caption_rows
    from tqdm import tqdm

    from vidspec.decoding.methods import build_decoder
    from vidspec.decoding.models import load_target
    from vidspec.decoding.types import Request

    target = load_target(a.target, device=a.device)
    ar = build_decoder("ar", target=target)
    data = Path(a.data)
    rows = []
    for r in caption_rows(data, a.split, 10 * a.limit):
        objs = json.loads(r["facts"])["objects"]
        if len(objs) == 1 and objs[0]["motion"] in _OPPOSITE:
            rows.append((r, objs[0]["motion"]))
        if len(rows) == a.limit:
            break
    records, tally = [], {k: Counter() for k in ("video", "first_frame", "last_frame")}
    for r, motion in tqdm(rows, desc="static clips"):
        clip = target.read_video(str(data / r["video"]))
        clips = {"video": clip,
                 "first_frame": replace(clip, frames=np.repeat(clip.frames[:1], clip.num_frames, axis=0)),
                 "last_frame": replace(clip, frames=np.repeat(clip.frames[-1:], clip.num_frames, axis=0))}
        rec = {"video": r["video"], "motion": motion}
        for name, c in clips.items():
            text = ar.generate(Request(prompt=r["question"], clip=c), max_new_tokens=64).text
            said = said_motion(text)
            rec[name] = said
            want_place = {"video": motion, "first_frame": motion, "last_frame": _OPPOSITE[motion]}[name]
            tally[name]["still" if said == "still" else "as the place says" if said == want_place else "other"] += 1
        records.append(rec)
    report = {"target": a.target, "videos": len(rows),
              "tally": {k: dict(v) for k, v in tally.items()}, "records": records}
    for k, v in report["tally"].items():
        print(f"{k:12s} {dict(v)}")
    Path(a.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
