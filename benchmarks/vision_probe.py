"""Is shape / motion linearly decodable from a trained target's visual features?

A diagnostic for testbed targets (LLaVA-OV releases): one-object SynthVid scenes of the easy world
(seed 0, rendered in memory) go through the target's own visual path, and a linear probe (L-BFGS,
fit on 75% of the scenes, scored on the rest) reads the attribute from:

- ``tower_mean``: the SigLIP tower's output for frame 0, mean over patches;
- ``lm_mean``: what the language model receives for frame 0 (projector + 2x2 pooling), mean over tokens;
- ``lm_first_last``: all LM-input tokens of the first and the last frame (position-aware: motion).

``--tower DIR`` first swaps in a pretrained tower (``tower.safetensors``) to compare it with the
tower the target ended up with after SFT.

Usage::

    python benchmarks/vision_probe.py --target data/releases/synthvid-target --scenes 1200
    python benchmarks/vision_probe.py --target T --tower runs/vision --out benchmarks/results/probe.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch


def features(target, n: int, seed: int = 0):
    from vidspec.decoding.types import VideoClip
    from vidspec.evaluation.synthvid.render import render_video
    from vidspec.evaluation.synthvid.world import preset, sample_scene

    cfg = preset("easy", min_objects=1, max_objects=1, events=(), max_events=0)
    shapes, motions = list(cfg.shapes), list(cfg.motions)
    rng = np.random.default_rng(seed)
    feats: dict[str, list[np.ndarray]] = {"tower_mean": [], "lm_mean": [], "lm_first_last": []}
    ys = []
    inner = target.model.model
    for _ in range(n):
        scene = sample_scene(rng, cfg)
        frames = render_video(scene)
        clip = VideoClip(frames=frames, fps=cfg.fps, source="synthvid",
                         timestamps=tuple(j / cfg.fps for j in range(len(frames))))
        vis = target.visual_inputs(clip)
        with torch.no_grad():
            pv = vis.tensors["pixel_values_videos"][0]
            tower = inner.vision_tower(pixel_values=pv, output_hidden_states=True).hidden_states[-1]
            lm = target.video_features(vis)
        t = pv.shape[0]
        per = lm.shape[0] // t
        lm = lm[: t * per].reshape(t, per, -1)
        feats["tower_mean"].append(tower[0].mean(0).float().numpy())
        feats["lm_mean"].append(lm[0].mean(0).float().numpy())
        feats["lm_first_last"].append(torch.cat([lm[0].flatten(), lm[-1].flatten()]).float().numpy())
        o = scene.objects[0]
        ys.append((shapes.index(o.shape), motions.index(o.motion)))
    return feats, np.array(ys), (len(shapes), len(motions))


def probe(x: list[np.ndarray], y: np.ndarray, classes: int) -> float:
    """Held-out accuracy of an L2-regularised linear classifier (first 75% fit, rest scored)."""
    X = torch.tensor(np.stack(x)).float()
    n = X.shape[0]
    tr, te = slice(0, int(0.75 * n)), slice(int(0.75 * n), n)
    X = (X - X[tr].mean(0)) / (X[tr].std(0) + 1e-5)
    yt = torch.tensor(y)
    w = torch.zeros(X.shape[1], classes, requires_grad=True)
    b = torch.zeros(classes, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=200)

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(X[tr] @ w + b, yt[tr]) + 1e-3 * (w ** 2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        return float(((X[te] @ w + b).argmax(-1) == yt[te]).float().mean())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", required=True, help="a LLaVA-OV release folder")
    ap.add_argument("--tower", default=None, help="swap in this pretrained tower first (vision_pretrain output)")
    ap.add_argument("--scenes", type=int, default=1200)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    torch.manual_seed(0)
    from vidspec.decoding.models import load_target

    target = load_target(a.target)
    if target.family != "llava-ov":
        raise SystemExit(f"vision_probe reads LLaVA-OV targets; {a.target} is {target.family}")
    if a.tower:
        from vidspec.draft_training.vision_pretrain import load_tower_into

        load_tower_into(target.model.model.vision_tower, a.tower)
    feats, ys, (n_shape, n_motion) = features(target, a.scenes)
    result = {"target": a.target, "tower": a.tower, "scenes": a.scenes,
              "chance": {"shape": 1 / n_shape, "motion": 1 / n_motion}, "probes": {}}
    for name, x in feats.items():
        result["probes"][name] = {"shape": probe(x, ys[:, 0], n_shape), "motion": probe(x, ys[:, 1], n_motion)}
        print(f"{name:>14}  shape {result['probes'][name]['shape']:.2f}  motion {result['probes'][name]['motion']:.2f}",
              flush=True)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
