"""Where a Sparrow distillation step's time goes, by input length (RESULTS 29.1 and 30.1: ~0.45 s on the long inputs).

For each (frame repeat, clips per batch) it builds real training batches with the data module (the same length
augmentation as ``--data.frame_repeat``), then times, with the device synchronised around each part:

- ``load``: the data module producing the batch (one process; the trainer's loader has workers);
- ``vision``: the target's vision tower, projector and pooling on the batch's distinct frames, as the module runs them
  (LLaVA-OneVision: ``sft.llava_video_kwargs``); ``vision_every_frame``: on every repeated frame, as before;
- ``target``: the frozen target's whole forward (``target_features``: tower, projector, every layer; a right-padded
  batch runs without its padding mask, which changes no state the draft reads: ``sft.causal_padding_mask``);
- ``target_before``: the same forward as before session 23 (the padding mask, the tower on every frame);
- ``step``: forward and backward of the whole distillation loss (``target`` included), as a training step runs it
  (autocast to bfloat16 on CUDA, as ``--trainer.precision bf16-mixed``).

The module takes a Sparrow recipe's options (``--recipe``; the draft without IVSB, its MTP steps, the target in
float32, as the headline's long Sparrow trains). The median over ``--steps`` batches is printed as a table and
written with the batches' token counts and the machine.

    python benchmarks/sparrow_step_profile.py --target runs/h17/releases/long-target --data runs/h17/synthvid \\
        --shapes 1x16,64x6,192x2 --steps 5 --device cuda --out sparrow_step_profile.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from pathlib import Path

import torch
import yaml

from vidspec.draft_training.data import VideoTextDataModule
from vidspec.draft_training.sparrow.module import SparrowDistillModule
from vidspec.evaluation.runner import machine_info

PARTS = ("load", "vision", "vision_every_frame", "target", "target_before", "step")


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """``"1x16,192x2"`` -> ``[(1, 16), (192, 2)]``: (frame repeat, clips a batch)."""
    out = []
    for part in text.split(","):
        repeat, _, clips = part.strip().partition("x")
        if not (repeat.isdigit() and clips.isdigit()) or int(repeat) < 1 or int(clips) < 1:
            raise SystemExit(f"--shapes: {part!r} is not REPEATxCLIPS (e.g. 192x2)")
        out.append((int(repeat), int(clips)))
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(device: torch.device, fn, *args) -> tuple[float, object]:
    _sync(device)
    t = time.perf_counter()
    out = fn(*args)
    _sync(device)
    return time.perf_counter() - t, out


def _cycle(dm: VideoTextDataModule):
    while True:  # a small dataset runs out of batches: start it again
        yield from dm.train_dataloader()


def _vision(module: SparrowDistillModule, batch: dict, every_frame: bool = False):
    """LLaVA-OV's tower, projector and pooling on the batch's distinct frames (as the module runs them) or, with
    ``every_frame``, on every repeated frame (as before session 23)."""
    if module.target.family != "llava-ov" or "pixel_values_videos" not in batch:
        return None
    pix = module._vision_kwargs({**batch, "frame_repeat": 1})["pixel_values_videos"]
    step = 1 if every_frame else batch.get("frame_repeat", 1)
    return module.target.model.model.get_video_features(pixel_values_videos=pix[:, ::step])


def _before(module: SparrowDistillModule, batch: dict):
    """The target's forward as before session 23: with the padding mask, the tower on every repeated frame."""
    return module.target_features({**batch, "frame_repeat": 1}, padding_mask=True)


def _train_step(module: SparrowDistillModule, batch: dict, autocast) -> None:
    """Forward under autocast, backward outside it, as Lightning's bf16-mixed runs a step."""
    module.draft.zero_grad(set_to_none=True)
    with autocast:
        loss = module.step(batch)[0]
    loss.backward()


def profile_shape(module: SparrowDistillModule, data: str, repeat: int, clips: int, steps: int,
                  device: torch.device, caption_styles: list[str]) -> dict:
    """The medians of :data:`PARTS` in seconds over ``steps`` batches (after one untimed warm-up batch)."""
    dm = VideoTextDataModule(path=data, tables=["."], caption_styles=caption_styles, batch_size=clips,
                             num_workers=0, frame_repeat=[repeat])
    dm.attach(module.input_spec())
    dm.setup("fit")
    batches = _cycle(dm)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    times: dict[str, list[float]] = {p: [] for p in PARTS}
    tokens, padded = [], []
    for i in range(steps + 1):
        t_load, batch = _timed(device, next, batches)
        batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        with autocast:
            t_vision, _ = _timed(device, _vision, module, batch)
            t_every, _ = _timed(device, _vision, module, batch, True)
            t_target, _ = _timed(device, module.target_features, batch)
            t_before, _ = _timed(device, _before, module, batch)
        t_step, _ = _timed(device, _train_step, module, batch, autocast)
        if i == 0:  # warm-up: kernels chosen, caches filled
            continue
        for part, t in zip(PARTS, (t_load, t_vision, t_every, t_target, t_before, t_step)):
            times[part].append(t)
        mask = batch["attention_mask"]
        tokens.append(int(mask.sum()))
        padded.append(int(mask.numel() - mask.sum()))
    medians = {p: statistics.median(v) for p, v in times.items()}
    if module.target.family != "llava-ov":
        medians["vision"] = medians["vision_every_frame"] = None
    return {"repeat": repeat, "clips": clips, "steps": steps, "seconds": medians,
            "tokens_per_batch": statistics.median(tokens), "padding_per_batch": statistics.median(padded)}


def recipe_options(recipe: Path) -> dict:
    """The Sparrow module's options in ``recipe`` (``model.init_args``) but its target, warm start and feature cache."""
    init = yaml.safe_load(recipe.read_text())["model"]["init_args"]
    return {k: v for k, v in init.items() if k not in ("target", "init_from", "feature_cache")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True, help="the target release (or a built-in tiny name)")
    ap.add_argument("--data", required=True, help="a dataset in SynthVid's schema")
    ap.add_argument("--shapes", default="1x16,64x6,192x2", help="REPEATxCLIPS, comma-separated")
    ap.add_argument("--steps", type=int, default=5, help="timed batches per shape (after one warm-up batch)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--recipe", type=Path, default=Path(__file__).resolve().parents[1] / "configs" / "train" /
                    "sparrow-tiny-cpu.yaml", help="the Sparrow recipe whose model options (draft, loss, target dtype) "
                    "the module takes; its target is replaced by --target (default: the headline's long Sparrow's)")
    ap.add_argument("--caption-styles", default="alpha")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    shapes = parse_shapes(args.shapes)
    device = torch.device(args.device)
    options = recipe_options(args.recipe)
    module = SparrowDistillModule(target=args.target, **options).to(device)
    module._ensure_target_device()
    rows = [profile_shape(module, args.data, r, c, args.steps, device, args.caption_styles.split(","))
            for r, c in shapes]
    print("| repeat x clips | tokens a batch (padding) | " + " | ".join(f"{p} (ms)" for p in PARTS) + " |")
    print("|---|---|" + "---|" * len(PARTS))
    for r in rows:
        cells = ["n/a" if r["seconds"][p] is None else f"{1000 * r['seconds'][p]:.1f}" for p in PARTS]
        print(f"| {r['repeat']} x {r['clips']} | {r['tokens_per_batch']:.0f} ({r['padding_per_batch']:.0f}) | "
              + " | ".join(cells) + " |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"target": args.target, "data": args.data, "recipe": str(args.recipe),
                                        "options": options, "rows": rows, "machine": machine_info(args.device)},
                                       indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
