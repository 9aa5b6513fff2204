"""Sparrow strict τ on short vs long videos (docs/algorithms.md, "Sparrow"; the "within 10%" bar).

The same SynthVid videos (easy world, rendered at 256 frames, seed 2: held out from the releases'
seed-0 training set) are read at several frame budgets (default 8, 64, 256: uniform sampling, so
the content is the same and only the number of frames changes). LLaVA-OV gives 16 visual tokens per
64x64 frame plus one newline token, so 8 / 64 / 256 frames are 129 / 1025 / 4097 visual tokens.
For each length the release target decodes the caption prompt greedily (batch 1, CPU) with

  ar       the reference (its fact-judge precision shows how the 8-frame-trained target copes)
  sparrow  Sparrow draft, strict verification, K = 4 (no visual KV in the draft: VATA)
  sd       the draft VLM (which does see all visual tokens), strict, K = 4

and reports τ (bonus included, AR = 1.0), acceptance per position, token identity with AR, decode
seconds per token and the draft's share of decode time. Check: Sparrow's τ at each long length
within 10% of its τ at the shortest length.

If the dataset is missing it is generated with::

    vidspec data synthvid --out data/cache/synthvid-long256 --num_videos 16 --seed 2 --preset easy \\
        --frames 256 --size 64x64 --styles alpha:1,beta:1 --captions_per_video 2 --split validation=1

Usage::

    .venv/bin/python benchmarks/sparrow_long_video.py        # ~3 min on 2 CPU cores
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from vidspec.evaluation.runner import git_info, machine_info
from vidspec.evaluation.testbed.figures import caption_rows


def gen_args(frames: int = 256, videos: int = 16) -> list[str]:
    """``vidspec data synthvid`` arguments of the held-out long set (seed 2, easy world, 64x64)."""
    return ["--num_videos", str(videos), "--seed", "2", "--preset", "easy", "--frames", str(frames), "--size", "64x64",
            "--styles", "alpha:1,beta:1", "--captions_per_video", "2", "--split", "validation=1", "--no_progress",
            "true"]


def tau_over(videos: list[dict], method: str, idx: list[int]) -> float:
    """τ of ``method`` over the videos ``idx`` (tokens emitted / verify passes, totals)."""
    emitted = sum(videos[i][method][0] for i in idx)
    passes = sum(videos[i][method][1] for i in idx)
    return emitted / passes if passes else 1.0


def main() -> None:

    from vidspec.decoding.methods import build_decoder
    from vidspec.decoding.models import load_target
    from vidspec.decoding.types import Request
    from vidspec.decoding.video import read_video
    from vidspec.evaluation.synthvid.judge import judge_caption

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data/cache/synthvid-long256")
    ap.add_argument("--target", default="data/releases/synthvid-target")
    ap.add_argument("--draft", default="data/releases/synthvid-draft")
    ap.add_argument("--sparrow", default="data/releases/sparrow-synthvid")
    ap.add_argument("--frames", default="8,64,256")
    ap.add_argument("--limit", type=int, default=12, help="videos (alpha-style caption prompt each)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--out", default="benchmarks/results/sparrow_long_video.json")
    ap.add_argument("--methods", default="ar,sparrow,sd", help="ar always runs; sd (the draft VLM) prefills the "
                    "whole video too, which doubles the CPU time at long lengths")
    ap.add_argument("--gen-frames", type=int, default=256, help="frames per video when --data must be generated")
    ap.add_argument("--gen-videos", type=int, default=16, help="videos when --data must be generated")
    args = ap.parse_args()
    t_start = time.perf_counter()
    data = Path(args.data)
    if not (data / "synthvid.json").is_file():
        vidspec = Path(sys.executable).parent / "vidspec"
        subprocess.run([str(vidspec), "data", "synthvid", "--out", str(data), *gen_args(args.gen_frames,
                                                                                         args.gen_videos)], check=True)
    lengths = [int(x) for x in args.frames.split(",")]
    methods = ["ar", *dict.fromkeys(m.strip() for m in args.methods.split(",") if m.strip() and m.strip() != "ar")]
    unknown = [m for m in methods if m not in ("ar", "sparrow", "sd")]
    if unknown:
        sys.exit(f"unknown method(s) {', '.join(unknown)} (choose from ar, sparrow, sd)")

    target = load_target(args.target, device="cpu", max_frames=max(lengths))
    decs = {"ar": build_decoder("ar", target=target)}
    if "sparrow" in methods:
        decs["sparrow"] = build_decoder("sparrow", target=target, draft=args.sparrow, k=args.k)
    if "sd" in methods:
        draft = load_target(args.draft, device="cpu", max_frames=max(lengths))
        decs["sd"] = build_decoder("sd", target=target, draft=draft, k=args.k)
    rows = caption_rows(data, "validation", args.limit, style="alpha")
    # warm-up (excluded): every method once at the shortest and the longest length
    for n in (lengths[0], lengths[-1]):
        clip = read_video(str(data / rows[0]["video"]), max_frames=n, max_pixels=target.max_read_pixels)
        for d in decs.values():
            d.generate(Request(rows[0]["question"], clip), max_new_tokens=8)

    per_len = {}
    per_video: dict[int, list[dict]] = {}  # per length: AR's text and each drafter's (emitted, passes) per video
    for n in lengths:
        per_video[n] = []
        acc = {m: {"emitted": 0, "passes": 0, "identical": 0, "decode_s": 0.0, "prefill_s": 0.0, "draft_s": 0.0,
                   "tokens": 0, "pos": [0] * args.k, "pos_n": [0] * args.k, "claims": 0, "true": 0} for m in decs}
        vis_tokens = None
        for i, r in enumerate(rows):
            print(f"  {n} frames: video {i + 1}/{len(rows)} ({time.perf_counter() - t_start:.0f} s)", flush=True)
            clip = read_video(str(data / r["video"]), max_frames=n, max_pixels=target.max_read_pixels)
            req = Request(r["question"], clip)
            if vis_tokens is None:
                vis_tokens = target.visual_inputs(clip).num_tokens
            ar_ids = None
            video: dict = {}
            per_video[n].append(video)
            for m, d in decs.items():
                res = d.generate(req, max_new_tokens=args.max_new_tokens)
                a = acc[m]
                video[m] = (sum(s.emitted for s in res.steps), len(res.steps))
                if m == "ar":
                    video["text"] = res.text
                    ar_ids = res.token_ids
                    j = judge_caption(res.text, json.loads(r["facts"]))
                    a["claims"] += len(j.claims)
                    a["true"] += sum(c.true for c in j.claims)
                a["identical"] += int(res.token_ids == ar_ids)
                a["emitted"] += sum(s.emitted for s in res.steps)
                a["passes"] += len(res.steps)
                a["decode_s"] += res.timings.decode_s
                a["prefill_s"] += res.timings.prefill_s
                a["draft_s"] += sum(s.draft_s for s in res.steps)
                a["tokens"] += res.num_new_tokens
                for s in res.steps:
                    for p in range(min(s.drafted, args.k)):
                        a["pos_n"][p] += 1
                        a["pos"][p] += int(s.accepted > p)
        per_len[n] = {"frames": n, "visual_tokens": vis_tokens, "videos": len(rows)}
        for m, a in acc.items():
            per_len[n][m] = {
                "tau": a["emitted"] / a["passes"] if a["passes"] else 1.0,
                "acceptance_by_position": [round(a["pos"][p] / a["pos_n"][p], 4) for p in range(args.k) if a["pos_n"][p]],
                "identical_to_ar": a["identical"] / len(rows),
                "decode_ms_per_token": 1000 * a["decode_s"] / max(1, a["tokens"]),
                "prefill_s_mean": a["prefill_s"] / len(rows),
                "draft_share_of_decode": a["draft_s"] / a["decode_s"] if a["decode_s"] else None,
                "mean_new_tokens": a["tokens"] / len(rows),
            }
        per_len[n]["ar"]["fact_precision"] = acc["ar"]["true"] / acc["ar"]["claims"] if acc["ar"]["claims"] else None
        per_len[n]["ar"]["fact_claims"] = acc["ar"]["claims"]
        for m in decs:
            if m != "ar":
                per_len[n][m]["dsr"] = acc["ar"]["decode_s"] / acc[m]["decode_s"]

    short = per_len[lengths[0]]
    checks = {}
    for n in lengths[1:]:
        # The videos whose AR caption at n frames is the caption at the shortest length: there the target
        # says the same thing, so a τ change is the drafter's; elsewhere the target's own text changed.
        same = [i for i, v in enumerate(per_video[n]) if v["text"] == per_video[lengths[0]][i]["text"]]
        per_len[n]["same_caption_videos"] = len(same)
        for m in (m for m in decs if m != "ar"):
            ratio = per_len[n][m]["tau"] / short[m]["tau"]
            checks[f"{m} tau at {n} frames within 10% of {lengths[0]} frames"] = {
                "ratio": ratio, "met": abs(ratio - 1) <= 0.10}
            if same:
                long_tau, short_tau = tau_over(per_video[n], m, same), tau_over(per_video[lengths[0]], m, same)
                per_len[n][m]["tau_same_caption"] = long_tau
                per_len[lengths[0]][m].setdefault("tau_same_caption_at", {})[str(n)] = short_tau
                checks[f"{m} tau at {n} frames within 10% of {lengths[0]} frames, on the {len(same)} videos whose "
                       f"AR caption is the same at both"] = {"ratio": long_tau / short_tau,
                                                             "met": abs(long_tau / short_tau - 1) <= 0.10}
    report = {
        "benchmark": "sparrow_long_video",
        "command": "python benchmarks/sparrow_long_video.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()),
        "machine": machine_info(), "git": git_info(),
        "data": str(data), "data_command": "vidspec data synthvid --out " + str(data) + " " + " ".join(
            gen_args(args.gen_frames, args.gen_videos)),
        "k": args.k, "greedy": True, "batch": 1, "max_new_tokens": args.max_new_tokens,
        "conventions": "tau incl. bonus (AR=1); DSR = AR decode s / method decode s (prefill excluded)",
        "lengths": {str(n): v for n, v in per_len.items()}, "checks": checks,
        "ar_captions": {str(n): [v["text"] for v in vids] for n, vids in per_video.items()},
        "seconds": time.perf_counter() - t_start,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")

    print(f"{len(rows)} videos, K={args.k}, greedy, CPU")
    others = [m for m in decs if m != "ar"]
    print(f"{'frames':>6s} {'vis tok':>7s} | {'AR prec':>7s} {'AR ms/tok':>9s} | "
          + " | ".join(f"{m + ' tau':>11s} {'ident':>5s} {'DSR':>5s} {'draft%':>6s}" for m in others))
    for n, v in per_len.items():
        a = v["ar"]
        print(f"{n:6d} {v['visual_tokens']:7d} | {a['fact_precision'] or 0:7.3f} {a['decode_ms_per_token']:9.2f} | "
              + " | ".join(f"{v[m]['tau']:11.2f} {v[m]['identical_to_ar']:5.2f} {v[m]['dsr']:5.2f} "
                           f"{100 * (v[m]['draft_share_of_decode'] or 0):6.1f}" for m in others))
    for k_, c in checks.items():
        print(f"  [{'MET' if c['met'] else 'MISSED'}] {k_}: ratio {c['ratio']:.3f}")
    print(f"wrote {args.out} in {report['seconds']:.0f} s")


if __name__ == "__main__":
    main()
