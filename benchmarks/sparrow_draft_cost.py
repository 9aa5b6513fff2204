"""Draft step cost of a Sparrow draft with ~1k vs ~8k visual tokens in the prompt (VATA check).

The draft attends only to text positions, so its per-step time must not grow with the video
(target figure: 8k within 1.1x of 1k). The target's prefill over the video is not timed; only
``SparrowDrafter.propose`` (K recursive draft steps after the committed tokens are fed) is.

Usage::

    python benchmarks/sparrow_draft_cost.py                       # CPU, tiny-qwen2.5-vl
    python benchmarks/sparrow_draft_cost.py --device cuda --target tiny-llava-ov --repeats 200
    python benchmarks/sparrow_draft_cost.py --target Qwen/Qwen2.5-VL-7B-Instruct --device cuda \\
        --sparrow releases/sparrow-qwen2.5-vl-7b

Prints a table and writes ``benchmarks/results/sparrow_draft_cost_<device>_<target>.json`` with
machine info.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from vidspec.decoding.sparrow import SparrowDrafter, new_sparrow_for
from vidspec.decoding.types import Request, VideoClip
from vidspec.evaluation.runner import machine_info


def frames_for(target, visual_tokens: int) -> tuple[VideoClip, int]:
    """A clip whose visual token count is close to ``visual_tokens`` (frame count chosen by probing)."""
    rng = np.random.default_rng(0)
    h, w = 56, 56

    def clip(n):
        return VideoClip(frames=rng.integers(0, 255, (n, h, w, 3), dtype=np.uint8), fps=4.0, source="bench")

    per = target.visual_inputs(clip(4)).num_tokens / 4  # tokens per frame (Qwen: per 2 frames / 2)
    n = max(2, int(round(visual_tokens / per)))
    c = clip(n)
    return c, target.visual_inputs(c).num_tokens


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Case:
    """One prompt (clip) with its own drafter state, timed round by round."""

    @torch.inference_mode()
    def __init__(self, target, model, clip: VideoClip):
        self.target = target
        self.state = target.prefill(Request("Describe the video in detail.", clip), frozenset({"penult"}))
        self.first = int(self.state.first_logits.argmax())
        self.drafter = SparrowDrafter(model)
        self.drafter.begin(target, self.state, self.first)
        self.base = self.drafter.cache_length
        self.times: list[float] = []

    @torch.inference_mode()
    def round(self, k: int, record: bool) -> None:
        from vidspec.decoding.models.base import crop_cache

        d = self.drafter
        sync(self.target.device)
        t0 = time.perf_counter()
        d.propose(k)
        sync(self.target.device)
        dt = time.perf_counter() - t0
        # Roll back to the state after begin() (as a fully rejected round would), so every round
        # feeds x_last and drafts k tokens against the same cache length.
        crop_cache(d.cache, self.base)
        del d._cache_index[self.base:]
        d._pending.tokens, d._pending.hidden, d._pending.index = (
            [self.first], [self.state.prompt_hidden_penult[-1]], [self.state.prompt_ids.shape[0]])
        if record:
            self.times.append(dt)

    def summary(self, k: int) -> dict:
        t = self.times
        return {"draft_cache_entries": self.base + k, "visual_tokens": int(self.state.visual_positions.numel()),
                "prompt_tokens": int(self.state.prompt_ids.shape[0]),
                "median_ms_per_round": 1e3 * statistics.median(t), "median_ms_per_step": 1e3 * statistics.median(t) / k,
                "p90_ms_per_round": 1e3 * float(np.percentile(t, 90)), "repeats": len(t)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="tiny-qwen2.5-vl")
    ap.add_argument("--sparrow", default=None, help="a Sparrow release (default: a random-weight draft)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--visual", default="1024,8192", help="visual token counts to compare")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (1 avoids oversubscription noise)")
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    if args.device == "cpu" and args.threads:
        torch.set_num_threads(args.threads)

    from vidspec.decoding.models import load_target

    target = load_target(args.target, device=args.device, dtype=args.dtype, max_frames=100000)
    model = (SparrowDrafter.from_pretrained(args.sparrow, target).model if args.sparrow
             else new_sparrow_for(target))
    wants = [int(x) for x in args.visual.split(",")]
    clips = [frames_for(target, w)[0] for w in wants]
    cases = [Case(target, model, c) for c in clips]
    # Interleave the cases round by round, so machine load drifts hit all of them alike.
    for i in range(args.warmup + args.repeats):
        for c in cases:
            c.round(args.k, record=i >= args.warmup)
    rows = []
    for want, clip, c in zip(wants, clips, cases):
        r = c.summary(args.k)
        r["requested_visual_tokens"] = want
        r["frames"] = clip.num_frames
        rows.append(r)
    ratio = rows[-1]["median_ms_per_step"] / rows[0]["median_ms_per_step"]
    print(f"Sparrow draft step cost, target {args.target} on {args.device}, K={args.k}")
    print(f"{'visual tokens':>14} {'frames':>7} {'draft KV':>9} {'ms/round':>9} {'ms/step':>8} {'p90 ms/round':>13}")
    for r in rows:
        print(f"{r['visual_tokens']:>14} {r['frames']:>7} {r['draft_cache_entries']:>9} "
              f"{r['median_ms_per_round']:>9.3f} {r['median_ms_per_step']:>8.3f} {r['p90_ms_per_round']:>13.3f}")
    print(f"ratio {rows[-1]['visual_tokens']} / {rows[0]['visual_tokens']} visual tokens: {ratio:.3f}x "
          f"(target <= 1.1x)")
    dev = torch.device(args.device)
    result = {"benchmark": "sparrow_draft_cost", "target": args.target, "sparrow": args.sparrow or "random-init",
              "k": args.k, "rows": rows, "ratio_last_over_first": ratio, "machine": machine_info(str(dev)),
              "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"sparrow_draft_cost_{dev.type}_{args.target.replace('/', '_')}.json"
    (out / name).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
