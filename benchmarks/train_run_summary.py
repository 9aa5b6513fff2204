"""Steps, final losses and step time of training runs, from their ``metrics.jsonl`` (plain or gzipped).

A run's step time is the median of the seconds between consecutive training rows (each row is one optimiser
step; the median leaves out the first steps' compilation and any checkpoint pause). A second table shows how the
loss went: its mean over each tenth of the steps, the first five steps' losses, the last learning rate as a share
of the highest logged, and the mean loss over the second half of the run by the number of clips in a batch (under
a frame budget, the clips' length sets it: RESULTS 30.1).

    python benchmarks/train_run_summary.py benchmarks/results/gpu_session22/long/long-sparrow-metrics.jsonl.gz \\
        benchmarks/results/gpu_session17/long/long-sparrow-metrics.jsonl.gz --out summary.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from pathlib import Path


def summarize(path: Path) -> dict:
    """``steps``, ``seconds_per_step`` (median), the last ``train/loss`` and, for a Sparrow run, its last
    ``train/sim_accept_len`` (None where absent)."""
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    rows = [r for r in (json.loads(line) for line in text.splitlines() if line.strip()) if "train/loss" in r]
    if not rows:
        raise SystemExit(f"{path}: no training rows")
    times = [r["time"] for r in rows if "time" in r]
    gaps = [b - a for a, b in zip(times, times[1:])]
    losses = [r["train/loss"] for r in rows]
    n = len(losses)
    tenths = [statistics.mean(losses[i * n // 10:(i + 1) * n // 10]) for i in range(10)] if n >= 10 else None
    lrs = [r["train/lr"] for r in rows if "train/lr" in r]
    by_batch: dict[int, list[float]] = {}
    for r in rows[n // 2:]:
        if "train/samples" in r:
            by_batch.setdefault(int(r["train/samples"]), []).append(r["train/loss"])
    return {"run": str(path), "steps": rows[-1]["step"], "seconds_per_step": statistics.median(gaps) if gaps else None,
            "final_loss": rows[-1]["train/loss"], "final_sim_accept_len": rows[-1].get("train/sim_accept_len"),
            "loss_by_tenth": tenths, "first_losses": losses[:5],
            "final_lr_share": lrs[-1] / max(lrs) if lrs and max(lrs) > 0 else None,
            "second_half_loss_by_batch_clips": {str(k): {"steps": len(v), "loss": statistics.mean(v)}
                                                for k, v in sorted(by_batch.items())}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("metrics", nargs="+", type=Path, help="metrics.jsonl or metrics.jsonl.gz files")
    ap.add_argument("--out", type=Path, help="write the JSON here")
    args = ap.parse_args(argv)
    rows = [summarize(p) for p in args.metrics]
    print("| run | steps | s a step (median) | final loss | final simulated accept length |")
    print("|---|---|---|---|---|")
    for r in rows:
        sim = "n/a" if r["final_sim_accept_len"] is None else f"{r['final_sim_accept_len']:.2f}"
        step = "n/a" if r["seconds_per_step"] is None else f"{r['seconds_per_step']:.3f}"
        print(f"| {r['run']} | {r['steps']} | {step} | {r['final_loss']:.3f} | {sim} |")
    print()
    print("| run | loss by tenth of the steps | first 5 losses | last LR / peak | second half: loss by clips a batch |")
    print("|---|---|---|---|---|")
    for r in rows:
        tenths = "n/a" if r["loss_by_tenth"] is None else " ".join(f"{x:.3f}" for x in r["loss_by_tenth"])
        first = " ".join(f"{x:.2f}" for x in r["first_losses"])
        share = "n/a" if r["final_lr_share"] is None else f"{r['final_lr_share']:.0%}"
        batches = ", ".join(f"{k}: {v['loss']:.3f} ({v['steps']})" for k, v in
                            r["second_half_loss_by_batch_clips"].items()) or "n/a"
        print(f"| {r['run']} | {tenths} | {first} | {share} | {batches} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"runs": rows, "note": "an analysis of recorded runs"}, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
