"""Triton GEMV / small-M GEMM candidates vs cuBLAS at 7B layer shapes, one call at a time (session 6).

Run on the GPU machine::

    python benchmarks/gemv_sweep_gpu.py OUT_DIR        # ~3 min on one H200

For each weight shape of a Qwen2.5-VL-7B layer and head (q/k/v, o, gate/up, down, full and 32k
heads) and 1 or 9 activation rows: ``F.linear`` (cuBLAS) and a sweep of block sizes of the two
kernels of ``vidspec.decoding.fast.gemv`` (session 6 ran this sweep with their first drafts, the
same loops without the bias epilogue and the K-edge masks). Each call reads one of 6 weight copies
in turn (so the weights come from HBM, not L2); medians of CUDA-event timings around single calls,
which include a launch each: these are upper bounds, the in-graph figures are engine_gpu.py's.
Writes ``gemv.json``.
"""

import functools
import itertools
import json
import sys

import torch
import torch.nn.functional as F
import triton

sys.path.insert(0, "benchmarks")
from engine_gpu import time_cuda

from vidspec.decoding.fast.gemv import _gemv_kernel, _small_mm_kernel


def timeit(fn, reps=40):
    return time_cuda(fn, reps=reps, warmup=3)


def launch(w, *, x, y, m, n, k, bn, bk, nw, ns):
    """One product ``y = x @ w.T`` with the candidate kernel for ``m`` rows and the given block sizes."""
    grid = (triton.cdiv(n, bn),)
    if m == 1:
        return _gemv_kernel[grid](
            x, w, w, y, n, K=k, HAS_BIAS=False, BN=bn, BK=bk, num_warps=nw, num_stages=ns
        )
    return _small_mm_kernel[grid](
        x, w, w, y, m, n, K=k, HAS_BIAS=False, BM=16, BN=bn, BK=bk, num_warps=nw, num_stages=ns
    )


def main(out):
    shapes = {
        "qkv": (4608, 3584),
        "o": (3584, 3584),
        "gu": (37888, 3584),
        "down": (3584, 18944),
        "head": (152064, 3584),
        "head32k": (32768, 3584),
    }
    copies = 6
    res = {}
    for name, (n, k) in shapes.items():
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
        nbytes = n * k * 2
        for m in (1, 9):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            it = itertools.cycle(ws)
            t_cublas = timeit(functools.partial(lambda x, it: F.linear(x, next(it)), x, it))
            row = {"cublas_ms": t_cublas, "cublas_TBps": nbytes / t_cublas / 1e9}
            ref = F.linear(x, ws[0]).float()
            best = None
            y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            if m == 1:
                cands = [(bn, bk, nw) for bn in (4, 8, 16) for bk in (256, 512) for nw in (4, 8)]
            else:
                cands = [(bn, bk, nw) for bn in (16, 32, 64) for bk in (64, 128, 256) for nw in (4, 8)]
            for bn, bk, nw in cands:
                if k % bk:
                    continue
                for ns in (2, 4):
                    f = functools.partial(launch, x=x, y=y, m=m, n=n, k=k, bn=bn, bk=bk, nw=nw, ns=ns)
                    try:
                        f(ws[0])
                        torch.cuda.synchronize()
                        err = float((y.float() - ref).abs().max() / ref.abs().max())
                        if err > 2e-2:
                            continue
                        t = timeit(functools.partial(lambda f, it: f(next(it)), f, it), reps=20)
                    except Exception:  # a block shape this Triton/GPU refuses: skip it
                        continue
                    if best is None or t < best[0]:
                        best = (t, dict(bn=bn, bk=bk, nw=nw, ns=ns, err=err))
            if best:
                row.update(triton_ms=best[0], triton_TBps=nbytes / best[0] / 1e9, triton_cfg=best[1])
            res[f"{name}_M{m}"] = row
            print(name, m, json.dumps(row), flush=True)
        del ws
        torch.cuda.empty_cache()
    json.dump(res, open(f"{out}/gemv.json", "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
