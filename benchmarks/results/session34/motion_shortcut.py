"""Session 34: where the objects whose motion a target misstates start, from train_testbed.py's figures.

Every false motion claim in the figures' ``captions.hallucinated`` is matched by colour to the scene's facts (claims
whose colour names no single object are skipped), and its true motion, the motion said and the object's first
position (``track.x0``, ``track.y0`` in pixels of the 64 x 64 frame) are listed, with a summary per (true, said) pair.
SynthVid's easy world starts a moving object at the edge it moves away from, so a language model that reads where
the object is, and not how that changes over the frames, names a direction from the place alone. How well the
place alone does: a 15-nearest-neighbour vote on the first place, fitted on the training split's objects; and the
same for the examples that data.reverse_time and data.time_crop make (the first place they show).

    python benchmarks/results/session34/motion_shortcut.py --data DATA --split validation \
        --figures F1.json [F2.json ...] --out OUT.json
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def false_motion_claims(figures: dict, facts: dict[str, dict]) -> list[dict]:
    """The figures' false motion claims with the claimed object's true motion and first position."""
    rows = []
    for h in figures["captions"]["hallucinated"]:
        scene = facts[h["video"]]
        for claim in h["false_claims"]:
            if claim["category"] != "motion":
                continue
            words = claim["text"].split()
            match = [o for o in scene["objects"] if o["colour"] == words[0]]
            if len(match) != 1:
                continue
            o = match[0]
            rows.append({"video": h["video"], "true": o["motion"], "said": words[-1],
                         "x0": round(o["track"]["x0"], 1), "y0": round(o["track"]["y0"], 1)})
    return rows


def summary(rows: list[dict]) -> dict:
    """Per (true motion, said motion): how many, and the mean first x and y."""
    groups = defaultdict(list)
    for r in rows:
        groups[f"{r['true']} -> {r['said']}"].append(r)
    return {k: {"n": len(v), "mean_x0": round(sum(r["x0"] for r in v) / len(v), 1),
                "mean_y0": round(sum(r["y0"] for r in v) / len(v), 1)} for k, v in sorted(groups.items())}


_OPPOSITE = {"left": "right", "right": "left", "up": "down", "down": "up", "still": "still"}


def _place(track: dict, k: int, n: int) -> tuple[float, float]:
    """An object's place at frame ``k`` (it stops at frame ``stop``)."""
    k = min(k, track.get("stop", n - 1))
    return track["x0"] + track["vx"] * k, track["y0"] + track["vy"] * k


def start_places(table, mode: str = "forwards", seed: int = 0, crop_min: int = 4) -> tuple[list, list[str]]:
    """Every object's first place (x0, y0) and motion as a training example shows them, once per video of a split.

    ``mode``: "forwards" (as recorded), "backwards" (data.reverse_time 1: the last place, the opposite motion), or
    "crop+reverse" (data.time_crop 1 with time_crop_min ``crop_min``, then data.reverse_time 0.5: the first place
    of a run of frames, the run played backwards half the time).
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    seen, places, motions = set(), [], []
    for r in table:
        if r["video"] in seen:
            continue
        seen.add(r["video"])
        facts = json.loads(r["facts"])
        n = int(facts["num_frames"])
        for o in facts["objects"]:
            t = o["track"]
            first, last, backwards = 0, n - 1, mode == "backwards"
            if mode == "crop+reverse":
                length = int(rng.integers(crop_min, n + 1))
                first = int(rng.integers(0, n - length + 1))
                last, backwards = first + length - 1, bool(rng.random() < 0.5)
            places.append(_place(t, last if backwards else first, n))
            motions.append(_OPPOSITE[o["motion"]] if backwards else o["motion"])
    return places, motions


def place_vote(train, test, k: int = 15) -> dict:
    """How well the first place alone names the motion: a k-nearest-neighbour vote fitted on ``train``'s objects."""
    import numpy as np

    xt, yt = np.asarray(train[0]), np.asarray(train[1])
    xv, yv = np.asarray(test[0]), np.asarray(test[1])
    pred = []
    for x in xv:
        near = np.argpartition(((xt - x) ** 2).sum(1), k)[:k]
        names, counts = np.unique(yt[near], return_counts=True)
        pred.append(names[counts.argmax()])
    pred = np.asarray(pred)
    ranges = {m: {"x0": [round(float(xv[yv == m, 0].min()), 1), round(float(xv[yv == m, 0].max()), 1)],
                  "y0": [round(float(xv[yv == m, 1].min()), 1), round(float(xv[yv == m, 1].max()), 1)]}
              for m in sorted(set(yv.tolist()))}
    return {"k": k, "objects": len(yv), "accuracy": round(float((pred == yv).mean()), 3),
            "per_motion": {m: round(float((pred[yv == m] == m).mean()), 3) for m in sorted(set(yv.tolist()))},
            "first_place_ranges": ranges}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="the SynthVid dataset the figures were measured on")
    ap.add_argument("--split", default="validation")
    ap.add_argument("--figures", nargs="+", required=True, help="train_testbed.py JSON files")
    ap.add_argument("--vote-limit", type=int, default=3000, help="test objects for the first-place vote")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    from datasets import load_from_disk

    table = load_from_disk(a.data)[a.split].select_columns(["video", "facts"])
    facts = {r["video"]: json.loads(r["facts"]) for r in table}
    train = load_from_disk(a.data)["train"].select_columns(["video", "facts"])
    report = {}
    for mode in ("forwards", "backwards", "crop+reverse"):
        train_places, test_places = start_places(train, mode), start_places(table, mode, seed=1)
        vote = place_vote(train_places, (test_places[0][:a.vote_limit], test_places[1][:a.vote_limit]))
        print(f"{mode}: the first place alone names the motion of {vote['objects']} {a.split} objects: "
              f"{vote['accuracy']:.3f} {vote['per_motion']}")
        report["first_place_vote" if mode == "forwards" else f"first_place_vote_{mode}"] = vote
    for f in a.figures:
        rows = false_motion_claims(json.loads(Path(f).read_text()), facts)
        report[f] = {"claims": rows, "summary": summary(rows)}
        print(f)
        for k, v in report[f]["summary"].items():
            print(f"  {k:16s} {v['n']:3d}  first x {v['mean_x0']:5.1f}  first y {v['mean_y0']:5.1f}")
    Path(a.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
