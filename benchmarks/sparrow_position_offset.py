"""Does a Sparrow draft's acceptance depend on how far its text sits from the prompt's start? (RESULTS 30.4)

In ``position_mode: target`` (the recipes' default) the draft gives each text position the target's position id, so
the text after a video sits ~1.1k positions after the prompt's first tokens for an 8-frame clip and ~26k after for
a 1536-frame video: the draft's rotary attention from the answer back to the system prompt spans distances that a
draft distilled on clips never saw. This isolates that effect. On the same clips (so the target's hidden states are
the same), it shifts the position ids of everything after the video by OFFSET, as a video OFFSET tokens longer would,
and measures the draft's teacher-forced agreement with the target on the answer tokens at each MTP step and the
simulated acceptance length (1 + Σ_k Π_{i<=k} acc_i, as training logs it). Offset 0 is the clip as it is. A draft in
``position_mode: reindex`` numbers text positions without the video and is unaffected by construction (checked).

    python benchmarks/sparrow_position_offset.py --target data/releases/synthvid-target \\
        --sparrow data/releases/sparrow-synthvid --data DATA --offsets 0,1024,4096,25000 --limit 64 --out OUT.json

DATA: a SynthVid folder with a validation split (``vidspec data synthvid ... --split validation=1``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from vidspec.draft_training.data import VideoTextDataModule
from vidspec.draft_training.sparrow import losses
from vidspec.draft_training.sparrow.module import SparrowDistillModule
from vidspec.evaluation.runner import machine_info


def shift_after_video(positions: torch.Tensor, input_ids: torch.Tensor, video_token_id: int,
                      offset: int) -> torch.Tensor:
    """``positions`` ``(A, B, L)`` with ``offset`` added at every index after each row's last video token."""
    is_vis = input_ids == video_token_id
    idx = torch.arange(input_ids.shape[1], device=input_ids.device)[None].expand_as(input_ids)
    last = torch.where(is_vis, idx, torch.full_like(idx, -1)).amax(-1, keepdim=True)
    after = (idx > last) & (last >= 0)
    return positions + offset * after[None].to(positions.dtype)


@torch.no_grad()
def measure(module: SparrowDistillModule, batches: list[dict], offsets: list[int]) -> list[dict]:
    """Per offset: answer tokens, top-1 agreement with the target and distillation loss at each MTP step (means over
    the answer tokens), simulated acceptance length."""
    module.eval()
    vt = module.target.video_token_id
    hits = {o: [0.0] * module.loss_cfg.mtp_steps for o in offsets}
    loss = {o: [0.0] * module.loss_cfg.mtp_steps for o in offsets}
    counts = dict.fromkeys(offsets, 0)
    for batch in batches:
        feats = module.target_features(batch)
        for o in offsets:
            shifted = {**feats, "positions": shift_after_video(feats["positions"], batch["input_ids"], vt, o)}
            db = module.draft_batch(batch, shifted)
            _, stats = module.mtp(db)
            n = int(db.sel.sum())
            counts[o] += n
            for s, st in enumerate(stats):
                hits[o][s] += float(st["acc"]) * n
                loss[o][s] += float(st["loss"]) * n
    rows = []
    for o in offsets:
        acc = [h / max(counts[o], 1) for h in hits[o]]
        rows.append({"offset": o, "answer_tokens": counts[o], "acc_by_step": acc,
                     "loss_by_step": [x / max(counts[o], 1) for x in loss[o]],
                     "sim_accept_len": losses.simulated_accept_length(acc)})
    return rows


def trained_options(release: Path) -> dict:
    """The ``draft`` and ``loss`` options the release was distilled with (its manifest's training config), so the
    draft runs as trained: without IVSB's visual states where it was trained without them, with its MTP steps."""
    manifest = json.loads((release / "manifest.json").read_text()) if (release / "manifest.json").is_file() else {}
    init = (manifest.get("training_config") or {}).get("model", {}).get("init_args", {})
    return {"draft": init.get("draft") or {"ivsb": False}, "loss": init.get("loss")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--sparrow", required=True, help="a Sparrow release of that target")
    ap.add_argument("--data", required=True, help="a SynthVid folder with a validation split")
    ap.add_argument("--offsets", default="0,1024,4096,25000")
    ap.add_argument("--limit", type=int, default=64, help="validation captions")
    ap.add_argument("--caption-styles", default="alpha", help="the style the target was trained to write")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    offsets = [int(o) for o in args.offsets.split(",")]
    if 0 not in offsets or min(offsets) < 0:
        ap.error("--offsets: non-negative, and 0 (the clip as it is) among them")
    module = SparrowDistillModule(target=args.target, init_from=args.sparrow, target_dtype="float32",
                                  **trained_options(Path(args.sparrow)))
    module.to(args.device)
    dm = VideoTextDataModule(path=args.data, tables=["."], caption_styles=args.caption_styles.split(","),
                             batch_size=args.batch, num_workers=0, max_val_samples=args.limit)
    dm.attach(module.input_spec())
    dm.setup("validate")
    batches = [{k: v.to(args.device) if isinstance(v, torch.Tensor) else v for k, v in b.items()}
               for b in dm.val_dataloader()]
    rows = measure(module, batches, offsets)
    base = rows[offsets.index(0)]["sim_accept_len"]
    print(f"position_mode {module.draft.config.position_mode}; {rows[0]['answer_tokens']} answer tokens")
    print("| offset after the video | " + " | ".join(f"acc step {s + 1}" for s in range(len(rows[0]["acc_by_step"])))
          + " | simulated acceptance length | vs offset 0 |")
    print("|---|" + "---|" * (len(rows[0]["acc_by_step"]) + 2))
    for r in rows:
        print(f"| {r['offset']} | " + " | ".join(f"{a:.3f}" for a in r["acc_by_step"])
              + f" | {r['sim_accept_len']:.3f} | {r['sim_accept_len'] / base:.3f} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "target": args.target, "sparrow": args.sparrow, "data": args.data, "limit": args.limit,
            "position_mode": module.draft.config.position_mode, "rows": rows, "machine": machine_info(args.device),
            "note": "target states of the clips as they are; only the draft's position ids after the video shift"},
            indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
