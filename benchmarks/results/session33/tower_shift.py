"""Does the Qwen2.5-VL tower read shapes as well on what the target is fed as on what it was pretrained on? (CPU)

The tower is pretrained (vision_learnability.py --family qwen2.5-vl) on one-object scenes rendered in memory, each
frame pair a frame twice ([f0, f0]). The target is fed the SynthVid mp4s (H.264, crf 18, yuv420p) decoded, as the
pairs (f0, f1), (f2, f3), ...: a moving object sits in two places within a pair. 38.3's target misnamed shapes in
captions of one-object scenes, still ones included, while the pretraining probe read shape at 0.971.

This loads a stage's tower and merger, renders held-out one-object scenes (vision_learnability.make_data, seed 1;
read-outs trained on seed 2) and encodes pair 0 four ways:

- clean [f0, f0]: the pretraining probe's input;
- codec [f0, f0]: frame 0 after the real path, encode_mp4 of the whole clip then vidspec's read_video;
- clean (f0, f1) and codec (f0, f1): the pair the target's first two frames make.

A linear read-out on the mean merged token (the probe's) is fitted on clean [f0, f0] and scored on each held-out
variant (how far the input the target gets is from the one the tower learnt), then refitted on each variant
(whether the information is still there).

    OMP_NUM_THREADS=1 python benchmarks/results/session33/tower_shift.py \
        --model /tmp/s32/gpu/stages/synthvid-target-sft --tower-json benchmarks/results/session32/gpu/tower.json \
        --out benchmarks/results/session33/tower_shift_s32.json
"""
import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "session32"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
from tower_readout import encode, fit, load_tower  # noqa: E402
from vision_learnability import make_data  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="exported Qwen2.5-VL folder (a stage or release)")
    ap.add_argument("--tower-json", required=True, help="the tower's tower.json (its ArchConfig)")
    ap.add_argument("--train", type=int, default=4000, help="read-out training scenes (seed 2)")
    ap.add_argument("--test", type=int, default=1000, help="held-out scenes (seed 1, the probe's test set's start)")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    t0 = time.perf_counter()
    probe = load_tower(a.model, a.tower_json)
    size = probe.patch * 8
    feats, labels = {}, {}
    for split, n, seed in (("train", a.train, 2), ("test", a.test, 1)):
        for codec in (False, True):
            first, _, ys, classes = make_data(n, seed, "easy", size, pairs=True, codec=codec)  # (N, 2, 3, H, W)
            name = "codec" if codec else "clean"
            # pair 0's merged tokens: frame 0 twice, and the pair (f0, f1) itself
            feats[(split, f"{name} [f0, f0]")] = encode(probe, first[:, 0], first[:, 0])[0]
            feats[(split, f"{name} (f0, f1)")] = encode(probe, first, first)[0]
        labels[split] = ys
        print(f"{split}: {n} scenes in {time.perf_counter() - t0:.0f} s", flush=True)
    from vidspec.evaluation.synthvid.world import preset

    variants = ["clean [f0, f0]", "codec [f0, f0]", "clean (f0, f1)", "codec (f0, f1)"]
    still = labels["test"][:, 2] == list(preset("easy").motions).index("still")
    rows = []
    for fit_on in ("clean [f0, f0]", None):
        for v in variants:
            src = fit_on or v
            for attr, col in (("shape", 0), ("colour", 1)):
                r = fit("mean", feats[("train", src)], labels["train"][:, col], feats[("test", v)],
                        labels["test"][:, col], a.steps, groups={"still": still, "moving": ~still})
                rows.append({"fitted_on": src, "scored_on": v, "attribute": attr, **r})
                print(json.dumps(rows[-1]), flush=True)
    doc = {"args": vars(a), "machine": {"python": platform.python_version(), "torch": torch.__version__,
                                         "cpu": platform.processor() or platform.machine(),
                                         "threads": torch.get_num_threads()},
           "chance": {"shape": 1 / classes[0], "colour": 1 / classes[1]}, "still_share": float(still.float().mean()),
           "seconds": round(time.perf_counter() - t0, 1), "rows": rows}
    Path(a.out).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
