"""Training throughput on 1 vs N devices with DDP: the same recipe, the same per-device batch.

Runs ``vidspec train fit`` once per device count (Lightning starts one process per device), reads
each run's ``metrics.jsonl`` (one record per optimizer step, with wall-clock time) and reports:

- samples/s over the steps after a warm-up (the logged batch sizes of those steps x devices, or global
  batch x steps when the recipe does not log them, / wall time between them);
- the ratio to the first device count (weak scaling: the per-device batch stays the same, so N
  devices see N times the samples per step; ideal is N);
- the loss curve of each run (JSON and a PNG plot), to show that the runs train alike.

Usage (SynthVid Sparrow distillation from the release target, 1 and 2 GPUs)::

    python benchmarks/ddp_scaling.py --devices 1,2 --steps 300 --out runs/ddp-scaling -- \
        --config configs/train/sparrow-tiny-cpu.yaml --trainer.accelerator gpu \
        --model.init_args.target data/releases/synthvid-target --data.path DATA ...

Everything after ``--`` goes to ``vidspec train fit`` unchanged; the script adds
``--trainer.devices N --trainer.strategy ddp --trainer.max_steps STEPS`` and a run directory.
On CPU, ``--trainer.accelerator cpu`` after ``--`` runs the N processes with gloo (what
``benchmarks/headline_gpu.sh`` does with ``SMOKE=1``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from vidspec.evaluation.runner import machine_info


def read_steps(path: Path) -> list[dict]:
    rows = []
    if not path.is_file():
        return rows
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            if "train/loss" in r and "time" in r:
                rows.append(r)
    return rows


def throughput(rows: list[dict], batch: int, devices: int, warmup: int) -> dict:
    """Samples/s between the first step after ``warmup`` and the last step."""
    rows = sorted(rows, key=lambda r: r["step"])
    after = [r for r in rows if r["step"] > warmup]
    if len(after) < 2:
        raise SystemExit(f"too few steps after warm-up {warmup} ({len(rows)} logged): raise --steps")
    a, b = after[0], after[-1]
    steps = b["step"] - a["step"]
    secs = b["time"] - a["time"]
    tps = [r["train/tokens_per_s"] for r in after if "train/tokens_per_s" in r]
    # The samples of steps a+1..b: the logged batch sizes (one rank's; every rank gets as many) when the
    # recipe logs them, so an epoch's short last batch counts as what it is; else batch x steps.
    timed = [r for r in after if r["step"] > a["step"]]
    if timed and all("train/samples" in r for r in timed):
        samples, source = sum(r["train/samples"] for r in timed) * devices, "logged batch sizes x devices"
    else:
        samples, source = steps * batch * devices, "per-device batch x devices x steps"
    return {
        "steps_timed": steps,
        "seconds": secs,
        "steps_per_s": steps / secs,
        "samples_timed": samples,
        "samples_from": source,
        "samples_per_s": samples / secs,
        "tokens_per_s_logged_median": statistics.median(tps) if tps else None,
    }


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for r in results:
        ax.plot([p[0] for p in r["loss_curve"]], [p[1] for p in r["loss_curve"]],
                label=f"{r['devices']} device(s), {r['samples_per_s']:.0f} samples/s")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("train/loss")
    ax.set_title("DDP: same per-device batch")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    fit_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, fit_args = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", default="1,2", help="comma-separated device counts")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30, help="steps left out of the timing")
    ap.add_argument("--batch", type=int, required=True, help="per-device batch size (passed as --data.batch_size)")
    ap.add_argument("--out", default="runs/ddp-scaling")
    ap.add_argument("--timeout", type=float, default=900)
    a = ap.parse_args(argv)
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    counts = [int(x) for x in a.devices.split(",") if x]
    results = []
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    for n in counts:
        run = out / f"devices{n}"
        cmd = [sys.executable, "-m", "vidspec.draft_training.cli", "fit", *fit_args,
               "--trainer.devices", str(n), "--trainer.strategy", "ddp", "--trainer.max_steps", str(a.steps),
               "--trainer.max_time", "null", "--data.batch_size", str(a.batch),
               "--trainer.default_root_dir", str(run), "--trainer.logger.init_args.save_dir", str(run),
               "--checkpoint.dirpath", str(run / "checkpoints")]
        print(f"== {n} device(s): {' '.join(cmd)}", flush=True)
        t0 = time.time()
        with (out / f"devices{n}.log").open("w") as log:
            proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=a.timeout)
        wall = time.time() - t0
        if proc.returncode != 0:
            print((out / f"devices{n}.log").read_text()[-4000:])
            raise SystemExit(f"training on {n} device(s) failed (exit {proc.returncode})")
        # the recipes version their logs: a fresh run folder logs into version_0 (an unversioned one into itself)
        rows = read_steps(next(iter(sorted(run.glob("version_*/metrics.jsonl"))), run / "metrics.jsonl"))
        tp = throughput(rows, a.batch, n, a.warmup)
        results.append({"devices": n, "wall_seconds": wall, **tp,
                        "loss_curve": [(r["step"], r["train/loss"]) for r in rows],
                        "final_loss": rows[-1]["train/loss"]})
        print(f"   {n} device(s): {tp['samples_per_s']:.1f} samples/s ({tp['steps_per_s']:.2f} steps/s), "
              f"final loss {rows[-1]['train/loss']:.4f}, {wall:.0f} s wall", flush=True)
    base = results[0]["samples_per_s"]
    for r in results:
        r["speedup"] = r["samples_per_s"] / base
    machine = machine_info("cuda" if torch.cuda.is_available() else "cpu")
    doc = {"args": vars(a), "fit_args": fit_args, "machine": machine, "results": results}
    (out / "ddp_scaling.json").write_text(json.dumps(doc, indent=1))
    try:
        plot(results, out / "ddp_loss.png")
    except ImportError:  # pragma: no cover - matplotlib is a dev dependency
        pass
    print("\n| devices | samples/s | speedup | final loss |\n|---|---|---|---|")
    for r in results:
        print(f"| {r['devices']} | {r['samples_per_s']:.1f} | {r['speedup']:.2f}x | {r['final_loss']:.4f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
