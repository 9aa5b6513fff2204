"""Where a fast-engine decode spends its time: per-round draft / verify / begin split, cProfile and torch.profiler.

Loads a target (and a Sparrow release and a draft VLM), builds the ``ar``, ``sparrow`` and ``sd``
decoders on ``--engine fast``, runs one warm-up decode and the graph capture the eval runner does
(:func:`vidspec.evaluation.runner.capture_fast_graphs`), then decodes ``--limit`` samples of a
SynthVid-format dataset and reports, per method: tokens, rounds, decode ms, the drafter's
``begin`` ms and the mean draft / verify ms per round (the engine's own timers), ms per token.
It also writes, per method, a cProfile of four decodes (``cprof-METHOD.txt`` by own time,
``cprof-METHOD-cum.txt`` cumulative), a ``torch.profiler`` table (``tprof-METHOD.txt``) and a Chrome
trace (``trace-METHOD.json``) of one decode: the trace shows each CUDA graph launch's host time
next to its kernels' GPU time, which is how session 3 found that graph launches, not kernels, cost
the testbed's rounds (docs/RESULTS.md section 10).

Run on the GPU machine from the repository root (packages installed or on PYTHONPATH)::

    python benchmarks/round_profile_gpu.py --target data/releases/synthvid-target \\
        --sparrow data/releases/sparrow-synthvid --draft data/releases/synthvid-draft \\
        --data DATA_DIR --out "$OUT"                                  # ~1 min on the H200

``--device cpu`` runs the same on CPU (no graphs; the profile is then of the eager fast path).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
from pathlib import Path

import torch


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--sparrow", required=True, help="Sparrow release for the sparrow method")
    ap.add_argument("--draft", required=True, help="draft VLM for the sd method")
    ap.add_argument("--data", required=True, help="a SynthVid-format dataset folder")
    ap.add_argument("--split", default="validation")
    ap.add_argument("--limit", type=int, default=10)
    ap.add_argument("--methods", default="ar,sparrow,sd")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--tree", default=None, metavar="TOTAL-DEPTH-TOPK",
                    help="tree shape of the tree methods, e.g. 32-6-6 (default: methods.DEFAULT_TREE); a "
                         "shallower tree captures fewer round graphs before timing")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default="benchmarks/results/round_profile")
    args = ap.parse_args(argv)

    from torch.profiler import ProfilerActivity, profile

    from vidspec.decoding.methods import as_fast, build_decoder
    from vidspec.decoding.models import load_target
    from vidspec.evaluation.benchmarks.registry import load_benchmark
    from vidspec.evaluation.runner import capture_fast_graphs, decode_sample

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    n_new = args.max_new_tokens
    tgt = as_fast(load_target(args.target, device=args.device))
    samples = load_benchmark("synthvid_captions", args.data, split=args.split, limit=args.limit)
    if len(samples) < 3:
        print(f"need at least 3 samples in {args.data} ({args.split}), got {len(samples)}", file=sys.stderr)
        return 2
    res = {}
    for m in [x for x in args.methods.split(",") if x]:
        draft = args.sparrow if "sparrow" in m else args.draft
        tree = None
        if args.tree and m.startswith("tree"):
            total, depth, top_k = (int(x) for x in args.tree.split("-"))
            tree = {"total_tokens": total, "depth": depth, "top_k": top_k}
        dec = build_decoder(m, target=tgt, draft=draft, engine="fast", device=args.device, tree=tree)
        decode_sample(dec, samples[0], n_new)  # warm-up, then the runner's graph capture
        capture_fast_graphs(dec, n_new)
        decode_sample(dec, samples[0], n_new)
        rows = []
        for s in samples[1:]:
            r, _, _ = decode_sample(dec, s, n_new)
            st = r.steps
            rows.append(dict(tok=len(r.token_ids), rounds=len(st), decode_ms=1e3 * r.timings.decode_s,
                             begin_ms=1e3 * r.timings.begin_s,
                             draft_ms=1e3 * statistics.mean(x.draft_s for x in st) if st else 0.0,
                             verify_ms=1e3 * statistics.mean(x.verify_s for x in st) if st else 0.0))
        agg = {k: statistics.mean(r[k] for r in rows)
               for k in ("tok", "rounds", "decode_ms", "begin_ms", "draft_ms", "verify_ms")}
        agg["ms_per_token"] = sum(r["decode_ms"] for r in rows) / sum(r["tok"] for r in rows)
        agg["drafter"] = type(dec.drafter).__name__
        # Sparrow chains run device rounds (draft and verify launched back to back): draft_ms is then the
        # draft's launch only and verify_ms holds the draft's device time (StepRecord).
        agg["device_rounds"] = bool(getattr(dec, "device_rounds", False))
        res[m] = agg
        print(m, json.dumps(agg), flush=True)
        pr = cProfile.Profile()
        pr.enable()
        for s in samples[1:5]:
            decode_sample(dec, s, n_new)
        pr.disable()
        for order, name in (("tottime", f"cprof-{m}.txt"), ("cumulative", f"cprof-{m}-cum.txt")):
            buf = io.StringIO()
            pstats.Stats(pr, stream=buf).sort_stats(order).print_stats(60)
            (out / name).write_text(buf.getvalue())
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.startswith("cuda") else [])
        with profile(activities=acts) as p:
            decode_sample(dec, samples[2], n_new)
        ka = p.key_averages()
        sort = "self_cuda_time_total" if args.device.startswith("cuda") else "self_cpu_time_total"
        (out / f"tprof-{m}.txt").write_text(ka.table(sort_by="self_cpu_time_total", row_limit=40) + "\n\n"
                                            + ka.table(sort_by=sort, row_limit=30))
        p.export_chrome_trace(str(out / f"trace-{m}.json"))
    (out / "round_profile.json").write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {out}/round_profile.json")
    return 0


if __name__ == "__main__":
    with torch.inference_mode():
        sys.exit(main())
