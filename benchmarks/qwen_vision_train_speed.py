"""Training speed of Qwen2.5-VL's vision tower: transformers' per-window attention against the grouped one.

Issue 4 measured a Qwen2.5-VL prototype at ~3 training steps/s on the H200: transformers' sdpa path
attends each window (each frame pair, at SynthVid's 64x64) in a call of its own, so a batch of 128
eight-frame videos makes 512 attention calls per vision layer, forward and backward.
``vidspec.draft_training.qwen_vision`` makes one call per window length. This times one training
step of the tower alone (forward, a loss on its output, backward), both ways, on the same weights
and inputs, interleaved, and reports the median ms and the ratio. The language model and the data
loader are not in it, so the ratio is an upper bound on what a whole SFT step gains.

    python benchmarks/qwen_vision_train_speed.py --device cuda --batch 128 --out runs/qwen_vision_speed.json
    python benchmarks/qwen_vision_train_speed.py --device cpu --batch 8 --steps 5

Defaults are the release profile's tower (hidden 128, 4 layers, 4 heads, 8 px patches; FAMILY=qwen2.5-vl
in ``benchmarks/train_releases_gpu.sh``) on 8 frames of 64x64.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from pathlib import Path

import torch

from vidspec.evaluation.runner import machine_info


def build_tower(hidden: int, layers: int, heads: int, patch: int, window: int):
    """The Qwen2.5-VL vision tower (with its merger into a 64-wide language model) of the testbed's ArchConfig."""
    from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLVisionConfig
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel

    from vidspec.draft_training.arch import ArchConfig, qwen_vision_config

    arch = ArchConfig(family="qwen2.5-vl", hidden_size=64, num_layers=1, num_heads=4, num_kv_heads=2,
                      vision_hidden_size=hidden, vision_layers=layers, vision_heads=heads, patch_size=patch,
                      window_size=window)
    config = Qwen2_5_VLVisionConfig(**qwen_vision_config(arch))
    config._attn_implementation = "sdpa"
    return Qwen2_5_VisionTransformerPretrainedModel(config)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch", type=int, default=128, help="videos per step")
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--size", type=int, default=64, help="frame side in pixels")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--patch", type=int, default=8)
    ap.add_argument("--window", type=int, default=112)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per path, after 2 untimed")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    from vidspec.decoding.fast.vision import window_plan
    from vidspec.draft_training.qwen_vision import use_grouped_vision_attention

    device = torch.device(args.device)
    torch.manual_seed(0)
    hf = build_tower(args.hidden, args.layers, args.heads, args.patch, args.window).to(device)
    grouped = copy.deepcopy(hf)
    use_grouped_vision_attention(grouped)
    cfg = hf.config
    t, side = args.frames // cfg.temporal_patch_size, args.size // cfg.patch_size
    grid = torch.tensor([[t, side, side]] * args.batch, device=device)
    per_patch = cfg.in_channels * cfg.temporal_patch_size * cfg.patch_size ** 2
    pix = torch.randn(int(grid.prod(-1).sum()), per_patch, device=device)
    merge = cfg.spatial_merge_size
    _, win_lengths, _ = window_plan(grid.tolist(), merge, args.window // merge // cfg.patch_size)
    windows = len(win_lengths)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast("cpu", enabled=False)

    def step(tower) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        with autocast:
            out = tower(pix, grid_thw=grid).pooler_output
        out.float().square().mean().backward()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        tower.zero_grad(set_to_none=True)
        return 1000.0 * (time.perf_counter() - t0)

    times: dict[str, list[float]] = {"per_window": [], "grouped": []}
    for i in range(args.steps + 2):
        for name, tower in (("per_window", hf), ("grouped", grouped)):  # interleaved: drift hits both alike
            ms = step(tower)
            if i >= 2:
                times[name].append(ms)
    with torch.no_grad(), autocast:
        diff = (hf(pix, grid_thw=grid).pooler_output.float() - grouped(pix, grid_thw=grid).pooler_output.float())
    med = {k: statistics.median(v) for k, v in times.items()}
    doc = {
        "args": vars(args), "machine": machine_info(str(device)),
        "vision_parameters": sum(p.numel() for p in hf.parameters()),
        "windows_per_layer": windows, "attention_calls_per_layer": {"per_window": windows, "grouped": 1},
        "ms_per_step_median": med, "ms_per_step": times,
        "speedup": med["per_window"] / med["grouped"],
        "max_abs_output_difference": float(diff.abs().max()),
    }
    print(f"Qwen2.5-VL vision tower, one training step (forward + backward), batch {args.batch}, "
          f"{args.frames} frames of {args.size}x{args.size}, {windows} windows per layer, {device}:")
    print(f"  per-window (transformers' sdpa): {med['per_window']:.1f} ms   grouped: {med['grouped']:.1f} ms   "
          f"ratio {doc['speedup']:.2f}x   max |output difference| {doc['max_abs_output_difference']:.2e}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.out}")
    return doc


if __name__ == "__main__":
    main()
