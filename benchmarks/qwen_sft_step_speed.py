"""One Qwen2.5-VL SFT training step, three ways: what each of vidspec's two host-side changes buys.

A release-size Qwen2.5-VL target trained at 278 ms a step on the H200 (batch 128, RESULTS 24.3) even with
the grouped vision attention, against ~133 ms for the LLaVA-OV target of the same size. What is left is
host work inside transformers' forward: ``get_rope_index`` loops over the batch's rows with a device read
per row, and the vision tower rebuilds its positions and window order per video.
``VLMSFTModule(batched_positions=True)`` replaces both with batched ops and a per-grid table
(``vidspec.draft_training.qwen_vision.qwen_forward_kwargs``). This times a whole step (the module's loss
and backward; the optimizer and the data loader are not in it) on one batch read from a SynthVid set on
disk, with the same weights each way, interleaved:

- ``transformers``: per-window vision attention, transformers' positions;
- ``grouped``: one attention call per window length (RESULTS 23.5), transformers' positions;
- ``grouped+batched``: both changes (the default).

    python benchmarks/qwen_sft_step_speed.py --data runs/synthvid --device cuda --batch 128 --out runs/qwen_sft_step.json
    python benchmarks/qwen_sft_step_speed.py --data data/cache/synthvid-cpu --device cpu --batch 16 --steps 3

Defaults are the release profile's Qwen2.5-VL target (``train_releases_gpu.sh PROFILE=release
FAMILY=qwen2.5-vl``: 6 layers of 192, tower of 4 layers of 128, 8 px patches), bf16 autocast on CUDA.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from vidspec.evaluation.runner import machine_info  # noqa: E402

VARIANTS = {"transformers": (False, False), "grouped": (True, False), "grouped+batched": (True, True)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="a SynthVid dataset folder (vidspec data synthvid)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=192)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--vision-hidden", type=int, default=128)
    ap.add_argument("--vision-layers", type=int, default=4)
    ap.add_argument("--vision-heads", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10, help="timed steps per variant, after 2 untimed")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    from vidspec.draft_training.arch import ArchConfig
    from vidspec.draft_training.data import VideoTextDataModule
    from vidspec.draft_training.sft import VLMSFTModule

    device = torch.device(args.device)
    arch = ArchConfig(family="qwen2.5-vl", hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads,
                      num_kv_heads=2, vision_hidden_size=args.vision_hidden, vision_layers=args.vision_layers,
                      vision_heads=args.vision_heads, image_size=64, patch_size=8)
    options = {"min_pixels": 4096, "max_pixels": 4096}
    modules = {}
    for name, (grouped, batched) in VARIANTS.items():
        torch.manual_seed(0)  # the same weights each way
        modules[name] = VLMSFTModule(tokenizer=str(Path(args.data) / "tokenizer"), arch=arch, max_frames=args.frames,
                                     adapter_options=options, grouped_vision_attention=grouped,
                                     batched_positions=batched).to(device)
    dm = VideoTextDataModule(args.data, tables=["."], batch_size=args.batch, shuffle=False, num_workers=0)
    dm.attach(modules["grouped+batched"].input_spec())
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    batch = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda"
                else torch.autocast("cpu", enabled=False))

    def step(module) -> tuple[float, float]:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        with autocast:
            loss, _ = module.loss(batch)
        loss.backward()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        module.zero_grad(set_to_none=True)
        return 1000.0 * (time.perf_counter() - t0), float(loss)

    times: dict[str, list[float]] = {k: [] for k in VARIANTS}
    losses: dict[str, float] = {}
    for i in range(args.steps + 2):
        for name, module in modules.items():  # interleaved: drift hits every variant alike
            ms, losses[name] = step(module)
            if i >= 2:
                times[name].append(ms)
    med = {k: statistics.median(v) for k, v in times.items()}
    tokens = int(batch["attention_mask"].sum())
    doc = {
        "args": vars(args), "machine": machine_info(str(device)), "batch_tokens": tokens,
        "parameters": sum(p.numel() for p in modules["grouped"].parameters()),
        "ms_per_step_median": med, "ms_per_step": times,
        "speedup_over_transformers": {k: med["transformers"] / v for k, v in med.items()},
        "loss": losses, "max_abs_loss_difference": max(abs(v - losses["transformers"]) for v in losses.values()),
    }
    print(f"Qwen2.5-VL SFT step (loss + backward), batch {args.batch} ({tokens} tokens), {device}:")
    for k, v in med.items():
        print(f"  {k:16s} {v:8.1f} ms   {doc['speedup_over_transformers'][k]:.2f}x   "
              f"{tokens / v * 1000:9.0f} tokens/s")
    print(f"  max |loss difference| {doc['max_abs_loss_difference']:.2e}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.out}")
    return doc


if __name__ == "__main__":
    main()
