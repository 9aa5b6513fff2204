"""How fast does a from-scratch SigLIP tower learn SynthVid's shapes, colours and motions?

The testbed Video-LLMs learn their vision tower from scratch. Released targets learned colours
but not shapes or motions, so this script isolates the tower: a ``SiglipVisionModel`` of a given
size is trained with direct attribute labels (no language model in the way) on rendered SynthVid
frames of one-object scenes, and its held-out accuracy is printed along the way:

- shape: from the mean-pooled tokens of frame 0 (chance 1/6 on the easy preset);
- colour: same features (chance 1/10);
- motion: a linear read-out of all tokens of the first and the last frame (chance 1/5), which needs
  the tokens to say *where* the object is, as the language model needs them to.

``--family qwen2.5-vl`` trains Qwen2.5-VL's tower instead (with its merger into ``--lm-hidden``, the
target's width), which reads the scene as two frame pairs, [first, first] and [last, last]
(:class:`vidspec.draft_training.vision_pretrain.QwenTowerProbe`).

With ``--save DIR`` the first configuration's tower is kept as the vision pretraining stage of
the testbed recipes (``VLMSFTModule(vision_init=DIR)``; see
:mod:`vidspec.draft_training.vision_pretrain`).

Usage (one line per configuration ``h<hidden>_l<layers>_p<patch>_lr<lr>[_b<batch>][_w<warmup>][_n<heads>][_is<std>]``;
``is`` sets a Qwen2.5-VL tower's initial weight std, ``ArchConfig.vision_init_std``)::

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


def parse_config(text: str) -> dict:
    out = {"name": text, "batch": 128, "warmup": 100}
    keys = {"h": "hidden", "l": "layers", "p": "patch", "lr": "lr", "b": "batch", "w": "warmup", "n": "heads",
            "is": "init_std"}
    for part in text.split("_"):
        for k in sorted(keys, key=len, reverse=True):
            if part.startswith(k):
                try:
                    out[keys[k]] = float(part[len(k):]) if k in ("lr", "is") else int(part[len(k):])
                except ValueError:
                    continue
                break
        else:
            raise SystemExit(f"cannot parse {part!r} in config {text!r}")
    for need in ("hidden", "layers", "patch", "lr"):
        if need not in out:
            raise SystemExit(f"config {text!r} lacks {need}")
    return out


def _render_ends(scenes: list, pairs: bool = False, codec: bool = False) -> list:
    """First and last frame of each scene (a worker's share of :func:`make_data`); with ``pairs`` the first and
    the last frame pair, (f0, f1) and (f[T-2], f[T-1]); with ``codec`` through H.264 and back, as a SynthVid mp4."""
    import tempfile

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


def make_data(n: int, seed: int, preset_name: str, size: int, workers: int = 1, pairs: bool = False,
              codec: bool = False):
    """``n`` one-object SynthVid scenes rendered in memory: first/last frames and (shape, colour, motion).

    The scenes are drawn in this process from one generator, so ``workers`` (processes that render them) changes
    the time taken, never the data. ``pairs``: each end is a frame pair, (f0, f1) and (f[T-2], f[T-1]) as
    ``(N, 2, 3, H, W)``, the pairs a Qwen2.5-VL target's tower reads (a moving object sits in two places in one);
    ``codec``: the frames go through H.264 (the world's crf) and vidspec's reader, as the target's do.
    """
    from vidspec.evaluation.synthvid.world import COLOURS, preset, sample_scene

    cfg = preset(preset_name, min_objects=1, max_objects=1, width=size, height=size, events=(), max_events=0)
    shapes, motions, colours = list(cfg.shapes), list(cfg.motions), list(COLOURS)
    rng = np.random.default_rng(seed)
    scenes = [sample_scene(rng, cfg) for _ in range(n)]
    ys = [(shapes.index(s.objects[0].shape), colours.index(s.objects[0].colour), motions.index(s.objects[0].motion))
          for s in scenes]
    if workers > 1 and n > 1:
        import multiprocessing as mp

        step = -(-n // (workers * 4))
        from functools import partial

        with mp.get_context("spawn").Pool(workers) as pool:
            ends = [e for part in pool.map(partial(_render_ends, pairs=pairs, codec=codec),
                                           [scenes[i:i + step] for i in range(0, n, step)]) for e in part]
    else:
        ends = _render_ends(scenes, pairs, codec)
    first, last = [e[0] for e in ends], [e[1] for e in ends]

    def to_t(a):  # (N, [2,] H, W, 3) -> (N, [2,] 3, H, W)
        x = torch.tensor(np.stack(a))
        return x.movedim(-1, -3).contiguous()

    return to_t(first), to_t(last), torch.tensor(ys), (len(shapes), len(colours), len(motions))


def arch_of(c: dict, size: int, family: str = "llava-ov", lm_hidden: int = 192):
    """The ArchConfig of a tower config. Qwen2.5-VL's merger projects into the language model's width,
    ``lm_hidden``, which must then be the target's (``arch.hidden_size``) for the tower to load into it."""
    from vidspec.draft_training.arch import ArchConfig

    extra = {"hidden_size": lm_hidden, "num_heads": 4} if family == "qwen2.5-vl" else {}
    return ArchConfig(family=family, vision_hidden_size=c["hidden"], vision_layers=c["layers"],
                      vision_heads=c.get("heads") or max(1, c["hidden"] // 32), image_size=size, patch_size=c["patch"],
                      vision_init_std=c.get("init_std"), **extra)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="h64_l2_p8_lr2e-3")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--train", type=int, default=20000, help="training scenes")
    ap.add_argument("--test", type=int, default=2000, help="held-out scenes (another seed)")
    ap.add_argument("--workers", type=int, default=1, help="processes that render the scenes (same data)")
    ap.add_argument("--preset", default="easy")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--every", type=int, default=500)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--family", default="llava-ov", choices=["llava-ov", "qwen2.5-vl"],
                    help="the tower: LLaVA-OV's SigLIP, or Qwen2.5-VL's (frame pairs, windowed attention, merger)")
    ap.add_argument("--lm-hidden", type=int, default=192,
                    help="qwen2.5-vl: the language model width its merger projects into (the target's hidden_size)")
    ap.add_argument("--pairs", action="store_true",
                    help="qwen2.5-vl: train and test on the scenes' real frame pairs, (f0, f1) and (f[T-2], f[T-1]), "
                         "instead of each end frame twice (the pairs the target's tower gets)")
    ap.add_argument("--codec", action="store_true",
                    help="frames through H.264 and vidspec's reader, as the target gets SynthVid's mp4s")
    ap.add_argument("--out", default="runs/vision-learnability")
    ap.add_argument("--init", default=None,
                    help="start from a trained tower: a --save folder or an exported target (tensors whose shapes "
                         "match; a Qwen2.5-VL merger's last projection starts afresh when --lm-hidden differs)")
    ap.add_argument("--save", default=None,
                    help="save the first config's tower here (tower.safetensors), for VLMSFTModule(vision_init=...)")
    a = ap.parse_args(argv)
    if a.pairs and a.family != "qwen2.5-vl":
        ap.error("--pairs is for --family qwen2.5-vl (SigLIP reads single frames)")
    configs = [parse_config(t) for t in a.configs.split(",") if t]
    t0 = time.perf_counter()
    f, l_, y, classes = make_data(a.train, 0, a.preset, a.size, a.workers, a.pairs, a.codec)
    tf, tl, ty, _ = make_data(a.test, 1, a.preset, a.size, a.workers, a.pairs, a.codec)
    print(f"rendered {a.train}+{a.test} scenes in {time.perf_counter() - t0:.1f} s", flush=True)
    from vidspec.draft_training.vision_pretrain import save_tower, train_tower

    results = []
    for i, c in enumerate(configs):
        arch = arch_of(c, a.size, a.family, a.lm_hidden)
        model, curve = train_tower(arch, a.steps, c["lr"], c["batch"], c["warmup"], a.device, (f, l_, y),
                                   (tf, tl, ty), classes, a.every, label=c["name"],
                                   log=lambda s: print(s, flush=True), init=a.init)
        results.append({"config": c, "curve": curve, "final": curve[-1],
                        "parameters": sum(p.numel() for p in model.tower.parameters())})
        if a.save and i == 0:
            save_tower(model, arch, a.save, {"final": curve[-1], "config": c, "args": vars(a)})
            print(f"saved the tower of {c['name']} to {a.save}", flush=True)
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
