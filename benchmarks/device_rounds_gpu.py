"""Sparrow rounds with and without a host synchronisation between draft and verify, side by side.

``SpeculativeDecoder(device_rounds=True)`` (the default) launches a FastSparrowDrafter's draft and
the FastTarget's verify step back to back, the draft tokens passing on the device; with ``False``
the host reads the draft tokens first and only then prepares and launches the verify step (what
every round did before session 6). This script decodes the same samples with AR and with Sparrow
both ways, alternating per sample, after one warm-up decode and the eval runner's graph capture,
and reports decode ms per token, DSR over AR, τ, and whether all give the same tokens. ``--k 4,6``
sweeps chain lengths and ``--trees 32-6-6,48-8-8`` adds tree-sparrow shapes (their device rounds
grow, rerank and build the verify tree on the device), each both ways.

Run on the GPU machine from the repository root (vidspec importable)::

    python benchmarks/device_rounds_gpu.py --target data/releases/synthvid-target \\
        --sparrow data/releases/sparrow-synthvid --data DATA_DIR --limit 10 --out "$OUT"    # ~1 min

``--device cpu`` runs the same on CPU (eager: the two ways then differ only in bookkeeping).
Writes ``device_rounds.json`` (with machine info) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from testbed_common import add_round_args, round_decoders, warm_up  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_round_args(ap, limit=10, k="4", out="benchmarks/results/device_rounds")
    args = ap.parse_args(argv)

    from vidspec.evaluation.benchmarks.registry import load_benchmark
    from vidspec.evaluation.runner import decode_sample, git_info, machine_info

    samples = load_benchmark("synthvid_captions", args.data, split=args.split, limit=args.limit + 1)
    if len(samples) < 2:
        print(f"need at least 2 samples in {args.data} ({args.split}), got {len(samples)}", file=sys.stderr)
        return 2
    ks = [int(k) for k in args.k.split(",") if k.strip()]
    trees = [t.strip() for t in args.trees.split(",") if t.strip()]
    decs = round_decoders(args.target, args.sparrow, args.device, ks, trees)
    n_new = args.max_new_tokens
    warm_up(decs, samples[0], n_new)
    runs: dict[str, list] = {"ar": []}
    for s in samples[1:]:
        r_ar, _, _ = decode_sample(decs["ar"], s, n_new)
        runs["ar"].append(r_ar)
        for name, dec in decs.items():
            if name == "ar":
                continue
            for way, on in (("device_rounds", True), ("host_rounds", False)):
                dec.device_rounds = on
                r, _, _ = decode_sample(dec, s, n_new)
                runs.setdefault(f"{name}_{way}", []).append(r)
            dec.device_rounds = True

    def per_token_ms(rs) -> float:  # decode time per token after the first (which comes from prefill)
        return 1e3 * sum(r.timings.decode_s for r in rs) / sum(len(r.token_ids) - 1 for r in rs)

    def tau(rs) -> float:
        steps = [st for r in rs for st in r.steps]
        return sum(st.emitted for st in steps) / max(1, len(steps))

    ar_ms = per_token_ms(runs["ar"])
    res = {"machine": machine_info(args.device), "git": git_info(), "args": vars(args), "samples": len(runs["ar"])}
    for name, rs in runs.items():
        ms = per_token_ms(rs)
        res[name] = {"ms_per_token": ms, "dsr": ar_ms / ms, "tau": tau(rs) if name != "ar" else 1.0,
                     "rounds_ms": 1e3 * sum(st.draft_s + st.verify_s for r in rs for st in r.steps)
                     / max(1, sum(len(r.steps) for r in rs)),
                     "identical_to_ar": all(a.token_ids == b.token_ids for a, b in zip(runs["ar"], rs))}
        print(f"{name:32s} {ms:7.3f} ms/token  DSR {ar_ms / ms:5.2f}x  tau {res[name]['tau']:.2f}  "
              f"round {res[name]['rounds_ms']:.3f} ms  identical to AR: {res[name]['identical_to_ar']}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "device_rounds.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    print(f"wrote {out / 'device_rounds.json'}")
    return 0


if __name__ == "__main__":
    with torch.inference_mode():
        sys.exit(main())
