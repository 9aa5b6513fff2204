"""Triton GEMV / small-M / split-K candidates vs cuBLAS at 7B layer shapes, timed inside CUDA graphs.

Run on the GPU machine (our packages importable)::

    python benchmarks/gemv_sweep_gpu.py OUT_DIR --table-out OUT_DIR/gemv_table.json   # < 150 s on one H200
    VIDSPEC_GEMV_TABLE=OUT_DIR/gemv_table.json python benchmarks/engine_gpu.py ...      # then use the table

For each weight shape of a Qwen2.5-7B layer and head (q/k/v fused 4608x3584, o 3584x3584, gate/up
fused 37888x3584, down 3584x18944, head 152064x3584) and 1 or 9 activation rows (``--rows``): cuBLAS
(``torch.mm``), the built-in config of ``vidspec.decoding.fast.gemv`` and a grid of candidate configs
(BN, BK, split, num_warps, num_stages) of its kernels. Each candidate is checked against cuBLAS
(max |Δ| <= 2e-2 of max |ref|), then timed as a CUDA graph of ``2 x copies`` back-to-back products,
each reading the next of ``copies`` weight copies (>= 200 MB in all, so the weights come from HBM,
not the 50 MB L2): the per-product time includes no launch gap, as in the engine's step graphs.
Medians of 5 replays. Candidates run in order of prior likelihood under a time budget per shape
(``--budget-s`` in all; Triton compiles dominate), so a short budget still measures the defaults.

Writes ``gemv.json`` (every measurement) to OUT_DIR and, with ``--table-out``, the best config per
shape as a ``VIDSPEC_GEMV_TABLE`` table: rows 1 -> class ``m1``, 9 -> ``m2-16`` (the verify steps),
others -> ``m<rows>``; ``"cublas"`` where cuBLAS was fastest.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

from vidspec.decoding.fast import gemv

SHAPES = {
    "qkv": (4608, 3584),
    "o": (3584, 3584),
    "gu": (37888, 3584),
    "down": (3584, 18944),
    "head": (152064, 3584),
}


def graph_ms(call, ws: list[torch.Tensor], reps: int = 5) -> float:
    """Median ms per product of a CUDA graph of ``max(4, 2 len(ws))`` products, ``call(w)`` rotating over ``ws``."""
    n = max(4, 2 * len(ws))
    for w in ws:
        call(w)  # warm-up outside capture (compiles; allocates split-K buffers)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        for i in range(n):
            call(ws[i % len(ws)])
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / n)
    del g
    return statistics.median(times)


def candidates(m: int, n: int, k: int) -> list[dict]:
    """Configs to try, most likely first (the built-in default leads); deduplicated by effective split."""
    d = gemv.default_config(m, n, k)
    out = [d]
    if m == 1:
        if n >= 65536:
            grid = [(bn, 512, s, 4, ns) for bn in (8, 16) for ns in (2, 4) for s in (1,)]
        elif n > 8192:  # gate/up: many tiles already
            grid = [(bn, 512, s, nw, 2) for s in (1, 2) for bn in (4, 8) for nw in (4, 8)]
        else:  # q/k/v, o, down: few tiles, split to fill the SMs
            splits = (2, 4, 1, 8) if k <= 8192 else (2, 4, 8, 1)
            grid = [(bn, bk, s, nw, 4 if k <= 8192 else 2) for s in splits for bn in (16, 8, 32) for bk in (512, 256)
                    for nw in (4,)]
    else:
        tiles = [(64, 128, 4), (32, 128, 4), (64, 256, 3), (32, 256, 3), (64, 64, 4)]
        if n >= 65536:
            grid = [(bn, bk, 1, 4, ns) for bn, bk, ns in tiles]
        else:
            base = gemv._split_for(math.ceil(n / 64), k, 128)
            splits = sorted({s for s in (base, max(1, base // 2), 2 * base, 1) if s >= 1}, key=lambda s: abs(s - base))
            if n > 8192:
                splits = [1, 2]
            grid = [(bn, bk, s, 4, ns) for s in splits for bn, bk, ns in tiles]
    seen = {(d["BN"], d["BK"], gemv._effective_split(k, d["BK"], d["split"]), d["num_warps"], d["num_stages"])}
    for bn, bk, s, nw, ns in grid:
        key = (bn, bk, gemv._effective_split(k, bk, s), nw, ns)
        if key not in seen:
            seen.add(key)
            out.append(dict(BN=bn, BK=bk, split=s, num_warps=nw, num_stages=ns))
    return out


def sweep(rows: list[int], shapes: dict, budget_s: float) -> dict:
    res: dict = {}
    combos_left, t_start = len(rows) * len(shapes), time.perf_counter()
    for name, (n, k) in shapes.items():
        nbytes = n * k * 2
        copies = max(2, math.ceil(200e6 / nbytes))
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
        for m in rows:
            t0 = time.perf_counter()
            per_combo = (budget_s - (t0 - t_start)) / combos_left  # what earlier shapes left unused carries over
            combos_left -= 1
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            ref = torch.nn.functional.linear(x, ws[0]).float()
            t_cublas = graph_ms(lambda w, x=x, y=y: torch.mm(x, w.t(), out=y), ws)
            row = {"n": n, "k": k, "m": m, "copies": copies, "cublas_ms": t_cublas, "cublas_TBps": nbytes / t_cublas / 1e9,
                   "tried": [], "skipped": 0}
            best = None
            for i, cfg in enumerate(candidates(m, n, k)):
                if i > 0 and time.perf_counter() - t0 > per_combo:
                    row["skipped"] += 1
                    continue
                try:
                    gemv.launch(x, ws[0], None, y, cfg)
                    torch.cuda.synchronize()
                    err = float((y.float() - ref).abs().max() / ref.abs().max())
                    if err > 2e-2:
                        row["tried"].append(dict(cfg, error=f"rel err {err:.3g}"))
                        continue
                    t = graph_ms(lambda w, x=x, y=y, cfg=cfg: gemv.launch(x, w, None, y, cfg), ws)
                except Exception as e:  # a block shape this Triton/GPU refuses: record and skip it
                    row["tried"].append(dict(cfg, error=f"{type(e).__name__}: {e}"[:200]))
                    continue
                row["tried"].append(dict(cfg, ms=t, TBps=nbytes / t / 1e9))
                if i == 0:
                    row["default_ms"], row["default_TBps"], row["default_cfg"] = t, nbytes / t / 1e9, cfg
                if best is None or t < best[0]:
                    best = (t, cfg)
            if best:
                row.update(best_ms=best[0], best_TBps=nbytes / best[0] / 1e9, best_cfg=best[1])
            row["seconds"] = time.perf_counter() - t0
            res[f"{name}_M{m}"] = row
            print(f"{name:5s} M={m:<2d} cublas {t_cublas * 1e3:7.1f} us {row['cublas_TBps']:4.2f} TB/s | default "
                  f"{row.get('default_ms', float('nan')) * 1e3:7.1f} us {row.get('default_TBps', 0):4.2f} TB/s | best "
                  f"{row.get('best_ms', float('nan')) * 1e3:7.1f} us {row.get('best_TBps', 0):4.2f} TB/s "
                  f"{json.dumps(row.get('best_cfg'))} ({len(row['tried'])} tried, {row['skipped']} over budget, "
                  f"{row['seconds']:.0f} s)", flush=True)
        del ws
        torch.cuda.empty_cache()
    return res


def to_table(res: dict, meta: dict) -> dict:
    """The fastest choice per (row class, shape): a config with its timing notes, or "cublas"."""
    table: dict = {"_meta": meta}
    for row in res.values():
        cls = "m1" if row["m"] == 1 else "m2-16" if row["m"] == 9 else f"m{row['m']}"
        shape = f"{row['n']}x{row['k']}"
        if "best_ms" in row and row["best_ms"] < row["cublas_ms"]:
            entry = dict(row["best_cfg"], _ms=round(row["best_ms"], 5), _TBps=round(row["best_TBps"], 3),
                         _cublas_ms=round(row["cublas_ms"], 5))
        else:
            entry = "cublas"
        table.setdefault(cls, {})[shape] = entry
    return table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", nargs="?", default="benchmarks/results", help="folder for gemv.json")
    ap.add_argument("--table-out", default=None, help="write the best config per shape here (VIDSPEC_GEMV_TABLE format)")
    ap.add_argument("--rows", default="1,9", help="comma-separated activation rows (1..16)")
    ap.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated subset of {','.join(SHAPES)}")
    ap.add_argument("--budget-s", type=float, default=110.0,
                    help="seconds for the candidate sweeps in all (split evenly per shape and row count)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("gemv_sweep_gpu.py needs a CUDA device", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    rows = [int(r) for r in args.rows.split(",") if r]
    shapes = {s: SHAPES[s] for s in args.shapes.split(",") if s}
    res = sweep(rows, shapes, args.budget_s)
    p = torch.cuda.get_device_properties(0)
    meta = {"gpu": torch.cuda.get_device_name(0), "sm_count": p.multi_processor_count, "torch": torch.__version__,
            "triton": __import__("triton").__version__, "rows": rows, "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "note": "benchmarks/gemv_sweep_gpu.py: fastest per shape, CUDA-graph timing over rotating weight copies"}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gemv.json").write_text(json.dumps({"meta": meta, "results": res}, indent=1))
    if args.table_out:
        table = to_table(res, meta)
        gemv.parse_table(table, args.table_out)  # what the engine will load must validate
        Path(args.table_out).write_text(json.dumps(table, indent=1))
        print(f"wrote table {args.table_out}")
    print(f"\n{'shape':8s}{'M':>3s}{'cuBLAS TB/s':>13s}{'default TB/s':>14s}{'best TB/s':>11s}  choice")
    for key, row in res.items():
        choice = "cublas" if not row.get("best_ms") or row["best_ms"] >= row["cublas_ms"] else json.dumps(row["best_cfg"])
        print(f"{key.rsplit('_M', 1)[0]:8s}{row['m']:>3d}{row['cublas_TBps']:>13.2f}{row.get('default_TBps', 0):>14.2f}"
              f"{row.get('best_TBps', 0):>11.2f}  {choice}")
    print(f"\nsweep done in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
