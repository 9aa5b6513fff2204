"""Issue 9's long-video bar pooled over several retrainings of one recipe.

Each retraining of the long target and its Sparrow draft gives one ratio (τ at the long reading over τ at the short
one) on its own videos (``long_tau.py``), and between retrainings that ratio has moved by more than the bar's margin
(RESULTS 25.5, 29-32). This pools them: the ratio of mean τ over every video of every retraining, with a bootstrap
that redraws each retraining's videos from its own (stratified: each draw keeps every retraining's count), so the
interval is that of the video sample given these retrainings. It does not measure the spread between retrainings;
k retrainings show that only as their k ratios, which are printed beside the pooled one.

    python benchmarks/long_bar_pooled.py \\
        benchmarks/results/gpu_session24/ft2/b/eval-long64,benchmarks/results/gpu_session24/ft2/b/eval-long1536 \\
        benchmarks/results/gpu_session25/long/eval-long64,benchmarks/results/gpu_session25/long/eval-long1536 \\
        --out benchmarks/results/gpu_session25/long_bar_pooled.json

Each argument is one retraining: its short and its long eval run, comma-separated (the folders ``long_tau.py`` reads).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from long_tau import BAR, analyse, run_records

from vidspec.evaluation.runner import git_info, machine_info


def pooled_ratio(runs: list[list[tuple[float, float]]], draws: int = 10_000, seed: int = 0) -> dict:
    """``runs``: per retraining, each video's (τ short, τ long). The pooled ratio (sum of long τ over sum of short
    τ, every video weighted alike), its stratified bootstrap (95% interval, share of draws at or above the bar) and
    each retraining's own ratio."""
    def ratio(rows: list[tuple[float, float]]) -> float:
        return sum(t for _, t in rows) / sum(s for s, _ in rows)

    rng = random.Random(seed)
    values = sorted(ratio([rows[rng.randrange(len(rows))] for rows in runs for _ in rows]) for _ in range(draws))
    every = [row for rows in runs for row in rows]
    pooled = ratio(every)
    return {"ratio": pooled, "met": pooled >= BAR, "videos": len(every),
            "per_retraining": [{"videos": len(rows), "ratio": ratio(rows)} for rows in runs],
            "bootstrap": {"draws": draws, "seed": seed, "stratified": True,
                          "ci95": [values[int(0.025 * draws)], values[int(0.975 * draws) - 1]],
                          "share_met": sum(v >= BAR for v in values) / draws}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("retrainings", nargs="+", help="SHORT_RUN,LONG_RUN: one retraining's two eval run folders")
    ap.add_argument("--method", default="sparrow")
    ap.add_argument("--out", type=Path, help="write the JSON here")
    args = ap.parse_args(argv)
    runs, docs = [], []
    for pair in args.retrainings:
        parts = [Path(p) for p in pair.split(",")]
        if len(parts) != 2:
            ap.error(f"{pair!r}: give SHORT_RUN,LONG_RUN (two eval run folders, comma-separated)")
        for p in parts:
            if not (p / "config.json").is_file():
                ap.error(f"{p}: not an eval run folder (no config.json)")
        doc = analyse([run_records(p) for p in parts], args.method)
        first, last = list(doc["lengths"])[0], list(doc["lengths"])[-1]
        short, long_ = doc["lengths"][first]["per_video"], doc["lengths"][last]["per_video"]
        runs.append([(short[v]["tau"], long_[v]["tau"]) for v in short])
        docs.append({"runs": [str(p) for p in parts], "frames": [int(k) for k in doc["lengths"]],
                     "tau": [doc["lengths"][k]["tau"] for k in doc["lengths"]], "ratio": doc["bar"]["ratio"],
                     "ci95": doc["bar"]["bootstrap"]["ci95"]})
    out = pooled_ratio(runs)
    print(f"| retraining | videos | tau short | tau long | ratio (bar {BAR}) | 95% interval |")
    print("|---|---|---|---|---|---|")
    for i, d in enumerate(docs):
        print(f"| {d['runs'][0]} | {out['per_retraining'][i]['videos']} | {d['tau'][0]:.2f} | {d['tau'][-1]:.2f} | "
              f"{d['ratio']:.3f} | {d['ci95'][0]:.3f}-{d['ci95'][1]:.3f} |")
    boot = out["bootstrap"]
    print(f"pooled over {len(runs)} retrainings, {out['videos']} videos: ratio {out['ratio']:.3f} "
          f"({'met' if out['met'] else 'missed'}); stratified bootstrap 95% interval {boot['ci95'][0]:.3f}-"
          f"{boot['ci95'][1]:.3f}, {boot['share_met']:.0%} of {boot['draws']} draws meet the bar")
    if args.out:
        out.update(retrainings=docs, method=args.method, machine=machine_info("cpu"), git=git_info(),
                   note="an analysis of recorded runs; the runs' own machine is in their summary.json")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
