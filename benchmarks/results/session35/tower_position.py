"""Do a tower's token *values* say where the object is? (CPU)

A Qwen2.5-VL tower has no absolute position embedding: its patches only see each other through 2-D RoPE, which
rotates queries and keys, not values. The pretraining probe's motion read-out (vision_pretrain.QwenTowerProbe) is
linear over every token slot, so the slot, not the token, carries the place. The language model gets the tokens as
values too (M-RoPE rotates only its queries and keys), so to compare where an object is in two frames it must find
the place through attention patterns alone. LLaVA-OneVision's SigLIP tower adds a learned absolute position
embedding to every patch, so its values can carry the place.

This renders one-object scenes of the easy world in memory (read-outs fitted on seed 2, scored on seed 1), encodes
frame 0 of each as a target reads it, and fits two read-outs of the object's column and row (thirds of the frame,
chance about 1/3):

- mean: linear on the mean of the tower's output tokens (no slot identity);
- mlp-max: one MLP on each token, the largest score over tokens (no slot identity, but the object's own token can
  be picked out by its content, as an attention head would: its value must carry the place);
- flat: linear on all tokens in slot order (the slot says it).

    OMP_NUM_THREADS=2 python benchmarks/results/session35/tower_position.py --family qwen2.5-vl \
        --model RELEASE --tower-json TOWER_JSON --out F
    OMP_NUM_THREADS=2 python benchmarks/results/session35/tower_position.py --family llava-ov \
        --model data/releases/synthvid-target --out F
"""
import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "session32"))
from tower_readout import fit, load_tower  # noqa: E402


def scenes_with_place(n: int, seed: int, size: int):
    """First frames ``(N, 3, H, W) uint8`` of ``n`` one-object scenes and the object's (column, row) third."""
    from vidspec.evaluation.synthvid.render import render_frame
    from vidspec.evaluation.synthvid.world import object_state, preset, sample_scene

    cfg = preset("easy", min_objects=1, max_objects=1, width=size, height=size, events=(), max_events=0)
    rng = np.random.default_rng(seed)
    frames, places = [], []
    for _ in range(n):
        s = sample_scene(rng, cfg)
        _, x, y, *_ = object_state(s.objects[0], 0)
        frames.append(render_frame(s, 0))
        places.append((min(2, int(3 * x / size)), min(2, int(3 * y / size))))
    x = torch.tensor(np.stack(frames)).movedim(-1, -3).contiguous()
    return x, torch.tensor(places)


@torch.no_grad()
def encode_siglip(tower, frames, batch: int = 250):
    from vidspec.decoding.models.llava_onevision import CLIP_MEAN, CLIP_STD

    mean, std = torch.tensor(CLIP_MEAN).view(1, 3, 1, 1), torch.tensor(CLIP_STD).view(1, 3, 1, 1)
    out = []
    for s in range(0, frames.shape[0], batch):
        x = (frames[s:s + batch].float() / 255.0 - mean) / std
        out.append(tower(pixel_values=x).last_hidden_state)
    return torch.cat(out)


@torch.no_grad()
def encode_qwen(probe, frames, batch: int = 250):
    out = []
    for s in range(0, frames.shape[0], batch):
        f = frames[s:s + batch]
        b = f.shape[0]
        tok = probe.encode(f, f).pooler_output  # [f0, f0] as one temporal patch: frame_per_patch's input
        out.append(tok.view(b, 2, -1, tok.shape[-1])[:, 0].clone())
    return torch.cat(out)


def load_siglip(model_dir: str):
    from transformers import SiglipVisionConfig, SiglipVisionModel

    from vidspec.draft_training.vision_pretrain import warm_start_tower

    vc = dict(json.loads((Path(model_dir) / "config.json").read_text())["vision_config"])
    vc.pop("model_type", None)
    tower = SiglipVisionModel(SiglipVisionConfig(**vc))
    fresh = warm_start_tower(tower, model_dir)  # the exported target's vision_tower tensors, every one
    assert not fresh, f"{model_dir}: its tower lacks {fresh}"
    return tower.eval(), vc["image_size"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", choices=("qwen2.5-vl", "llava-ov"), required=True)
    ap.add_argument("--model", required=True, help="an exported target (stage or release)")
    ap.add_argument("--tower-json", help="qwen2.5-vl: the tower's tower.json (its ArchConfig)")
    ap.add_argument("--train", type=int, default=4000)
    ap.add_argument("--test", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    t0 = time.perf_counter()
    if a.family == "qwen2.5-vl":
        probe = load_tower(a.model, a.tower_json)
        size = probe.patch * 8

        def enc(f):
            return encode_qwen(probe, f)
    else:
        tower, size = load_siglip(a.model)

        def enc(f):
            return encode_siglip(tower, f)
    data = {}
    for split, n, seed in (("train", a.train, 2), ("test", a.test, 1)):
        frames, places = scenes_with_place(n, seed, size)
        data[split] = (enc(frames), places)
        print(f"{split}: {n} scenes in {time.perf_counter() - t0:.0f} s", flush=True)
    rows = []
    for kind in ("mean", "mlp-max", "flat"):
        for axis, col in (("column", 0), ("row", 1)):
            r = fit(kind, data["train"][0], data["train"][1][:, col], data["test"][0], data["test"][1][:, col],
                    a.steps)
            rows.append({"readout": kind, "place": axis, **r})
            print(json.dumps(rows[-1]), flush=True)
    share = [float((data["test"][1][:, c] == k).float().mean()) for c in (0, 1) for k in range(3)]
    doc = {"args": vars(a), "tokens": int(data["test"][0].shape[1]),
           "machine": {"python": platform.python_version(), "torch": torch.__version__,
                       "cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads()},
           "majority": {"column": max(share[:3]), "row": max(share[3:])},
           "seconds": round(time.perf_counter() - t0, 1), "rows": rows}
    Path(a.out).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
