"""How fast does a from-scratch SigLIP tower learn SynthVid's shapes, colours and motions?

The testbed Video-LLMs learn their vision tower from scratch. Released targets learned colours
but not shapes or motions, so this script isolates the tower: a ``SiglipVisionModel`` of a given
size is trained with direct attribute labels (no language model in the way) on rendered SynthVid
frames of one-object scenes, and its held-out accuracy is printed along the way:

- shape: from the mean-pooled tokens of frame 0 (chance 1/6 on the easy preset);
- colour: same features (chance 1/10);
- motion: a linear read-out of all tokens of the first and the last frame (chance 1/5), which needs
  the tokens to say *where* the object is, as the language model needs them to.

Usage (one line per configuration ``h<hidden>_l<layers>_p<patch>_lr<lr>[_b<batch>][_w<warmup>]``)::

    python benchmarks/vision_learnability.py --configs h64_l2_p8_lr2e-3,h128_l4_p4_lr5e-4 \
        --steps 3000 --device cuda --out runs/vision-learnability

It writes ``vision_learnability.json`` (curves, final accuracies, machine info) under ``--out``.
Frames are rendered in memory (no H.264), so this measures learnability, not codec effects.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn


def parse_config(text: str) -> dict:
    out = {"name": text, "batch": 128, "warmup": 100}
    keys = {"h": "hidden", "l": "layers", "p": "patch", "lr": "lr", "b": "batch", "w": "warmup"}
    for part in text.split("_"):
        for k in sorted(keys, key=len, reverse=True):
            if part.startswith(k):
                try:
                    out[keys[k]] = float(part[len(k):]) if k == "lr" else int(part[len(k):])
                except ValueError:
                    continue
                break
        else:
            raise SystemExit(f"cannot parse {part!r} in config {text!r}")
    for need in ("hidden", "layers", "patch", "lr"):
        if need not in out:
            raise SystemExit(f"config {text!r} lacks {need}")
    return out


def make_data(n: int, seed: int, preset_name: str, size: int):
    from vidspec.evaluation.synthvid.render import render_frame
    from vidspec.evaluation.synthvid.world import COLOURS, preset, sample_scene

    cfg = preset(preset_name, min_objects=1, max_objects=1, width=size, height=size, events=(), max_events=0)
    shapes, motions, colours = list(cfg.shapes), list(cfg.motions), list(COLOURS)
    rng = np.random.default_rng(seed)
    first, last, ys = [], [], []
    for _ in range(n):
        s = sample_scene(rng, cfg)
        o = s.objects[0]
        first.append(render_frame(s, 0))
        last.append(render_frame(s, cfg.num_frames - 1))
        ys.append((shapes.index(o.shape), colours.index(o.colour), motions.index(o.motion)))
    to_t = lambda a: torch.tensor(np.stack(a)).permute(0, 3, 1, 2).contiguous()  # noqa: E731
    return to_t(first), to_t(last), torch.tensor(ys), (len(shapes), len(colours), len(motions))


class Probe(nn.Module):
    def __init__(self, c: dict, size: int, classes: tuple[int, int, int]):
        super().__init__()
        from transformers import SiglipVisionConfig, SiglipVisionModel

        h = c["hidden"]
        vc = SiglipVisionConfig(hidden_size=h, intermediate_size=4 * h, num_hidden_layers=c["layers"],
                                num_attention_heads=max(1, h // 32), image_size=size, patch_size=c["patch"],
                                vision_use_head=False)
        self.tower = SiglipVisionModel(vc)
        n_tok = (size // c["patch"]) ** 2
        self.shape = nn.Linear(h, classes[0])
        self.colour = nn.Linear(h, classes[1])
        self.motion = nn.Linear(2 * n_tok * h, classes[2])

    def forward(self, first: torch.Tensor, last: torch.Tensor):
        b = first.shape[0]
        x = torch.cat([first, last]).float() / 127.5 - 1.0
        tok = self.tower(pixel_values=x).last_hidden_state
        f, l_ = tok[:b], tok[b:]
        pooled = f.mean(1)
        return self.shape(pooled), self.colour(pooled), self.motion(torch.cat([f, l_], 1).flatten(1))


def run(c: dict, data, test, classes, steps: int, device: str, size: int, every: int) -> dict:
    torch.manual_seed(0)
    model = Probe(c, size, classes).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=c["lr"], weight_decay=0.05)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / c["warmup"]) * 0.5 * (1 + np.cos(np.pi * min(1.0, s / steps))))
    first, last, ys = (t.to(device) for t in data)
    tf, tl, ty = (t.to(device) for t in test)
    curve, t0 = [], time.perf_counter()
    ce = nn.functional.cross_entropy
    for step in range(1, steps + 1):
        idx = torch.randint(0, first.shape[0], (c["batch"],), device=device)
        out = model(first[idx], last[idx])
        loss = sum(ce(o, ys[idx, i]) for i, o in enumerate(out))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % every == 0 or step == steps:
            model.eval()
            with torch.no_grad():
                accs = [0.0, 0.0, 0.0]
                for s in range(0, tf.shape[0], 500):
                    o = model(tf[s:s + 500], tl[s:s + 500])
                    for i in range(3):
                        accs[i] += float((o[i].argmax(-1) == ty[s:s + 500, i]).sum())
                accs = [a / tf.shape[0] for a in accs]
            model.train()
            row = {"step": step, "loss": float(loss), "shape": accs[0], "colour": accs[1], "motion": accs[2],
                   "seconds": time.perf_counter() - t0}
            curve.append(row)
            print(f"{c['name']:>28} step {step:5d} loss {row['loss']:.3f} shape {accs[0]:.3f} "
                  f"colour {accs[1]:.3f} motion {accs[2]:.3f} ({row['seconds']:.0f} s)", flush=True)
    return {"config": c, "curve": curve, "final": curve[-1],
            "parameters": sum(p.numel() for p in model.tower.parameters())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="h64_l2_p8_lr2e-3")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--train", type=int, default=20000, help="training scenes")
    ap.add_argument("--test", type=int, default=2000, help="held-out scenes (another seed)")
    ap.add_argument("--preset", default="easy")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--every", type=int, default=500)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default="runs/vision-learnability")
    a = ap.parse_args(argv)
    configs = [parse_config(t) for t in a.configs.split(",") if t]
    t0 = time.perf_counter()
    f, l_, y, classes = make_data(a.train, 0, a.preset, a.size)
    tf, tl, ty, _ = make_data(a.test, 1, a.preset, a.size)
    print(f"rendered {a.train}+{a.test} scenes in {time.perf_counter() - t0:.1f} s", flush=True)
    results = [run(c, (f, l_, y), (tf, tl, ty), classes, a.steps, a.device, a.size, a.every) for c in configs]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    machine = {"python": platform.python_version(), "torch": torch.__version__, "device": a.device,
               "gpu": torch.cuda.get_device_name() if a.device.startswith("cuda") else None,
               "cpu": platform.processor() or platform.machine()}
    doc = {"args": vars(a), "machine": machine, "chance": {"shape": 1 / classes[0], "colour": 1 / classes[1],
                                                           "motion": 1 / classes[2]}, "results": results}
    (out / "vision_learnability.json").write_text(json.dumps(doc, indent=1))
    print("\n| config | params | shape | colour | motion | s |\n|---|---|---|---|---|---|")
    for r in results:
        fi = r["final"]
        print(f"| {r['config']['name']} | {r['parameters'] / 1e6:.2f}M | {fi['shape']:.3f} | {fi['colour']:.3f} | "
              f"{fi['motion']:.3f} | {fi['seconds']:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
