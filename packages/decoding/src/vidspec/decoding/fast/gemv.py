"""Triton matrix-vector products for decode and verify steps (``T <= 16`` rows), an opt-in alternative to cuBLAS.

A decode step multiplies one activation row (a verify step a few) by every weight matrix of the
model, so its cost is reading the weights: the product is bound by memory bandwidth, not by
arithmetic. On the H200 at 7B layer shapes, cuBLAS reached 0.5-4.0 TB/s on these products, one call
at a time (session 6's sweep, docs/RESULTS.md section 13), and simple Triton kernels were faster for
most shapes. Two kernels:

- ``T == 1``: each program reduces ``BN`` weight rows against the activation row, ``BK`` columns at
  a time (plain loads and a float32 multiply-add, no tensor cores);
- ``2 <= T <= 16``: each program computes a ``(16, BN)`` tile with ``tl.dot`` (rows past T masked).

Both add the bias in the epilogue. In CUDA graphs of whole 7B-shaped steps (session 6), the GEMV made
the AR step 10% faster than cuBLAS (4.34 vs 4.80 ms at 2k context), but the dot-tile kernel made the
K=8 verify step slower (5.42 vs 4.98 ms), so FastLM's ``gemv`` option routes single-token steps only. :func:`small_linear` is registered as the custom op
``vidspec::small_linear`` through ``torch.library.triton_op``, so ``torch.compile`` keeps it inside
a compiled piece (FastLM's ``gemv=True``) and a CUDA graph captures it like any kernel. The block
sizes come from that sweep: a fixed table by weight shape, no autotuning at run time (a graph
capture must not time kernels).

Import this module only where Triton exists (CUDA, or CPU with ``TRITON_INTERPRET=1`` for tests).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

#: The largest number of rows the Triton path takes (one ``tl.dot`` tile); longer inputs use cuBLAS.
MAX_ROWS = 16


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, b_ptr, y_ptr, N, K: tl.constexpr, HAS_BIAS: tl.constexpr, BN: tl.constexpr,
                 BK: tl.constexpr):
    pid = tl.program_id(0)
    rn = pid * BN + tl.arange(0, BN)
    live = rn < N
    acc = tl.zeros((BN, BK), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        kin = rk < K
        w = tl.load(w_ptr + rn[:, None] * K + rk[None, :], mask=live[:, None] & kin[None, :], other=0.0)
        x = tl.load(x_ptr + rk, mask=kin, other=0.0)
        acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
    y = tl.sum(acc, 1)
    if HAS_BIAS:
        y += tl.load(b_ptr + rn, mask=live, other=0.0).to(tl.float32)
    tl.store(y_ptr + rn, y.to(y_ptr.dtype.element_ty), mask=live)


@triton.jit
def _small_mm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K: tl.constexpr, HAS_BIAS: tl.constexpr, BM: tl.constexpr,
                     BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    rn = pid * BN + tl.arange(0, BN)
    rm = tl.arange(0, BM)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        kin = rk < K
        x = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & kin[None, :], other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rn[None, :] < N) & kin[:, None], other=0.0)
        acc += tl.dot(x, w)
    if HAS_BIAS:
        acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def gemv_config(m: int, n: int, k: int) -> dict:
    """Block sizes for an ``(m, k) x (k, n)`` product (the fastest of session 6's H200 sweep per shape class).

    ``m == 1``: ``BN`` 16 for narrow outputs (q/k/v, o), 4 for wide ones with long rows (gate/up,
    down), 8 for LM heads; ``BK`` 512 when it divides ``k``. ``m > 1``: ``(16, BN)`` dot tiles, ``BN``
    64 (32 for LM heads).
    """
    bk = 512 if k % 512 == 0 else 256
    if m == 1:
        if n <= 8192:
            return dict(BN=16, BK=bk, num_warps=4, num_stages=4)
        if n >= 65536:
            return dict(BN=8, BK=bk, num_warps=4, num_stages=2)
        return dict(BN=4, BK=bk, num_warps=8 if k > 8192 else 4, num_stages=2)
    if n >= 65536:
        return dict(BN=32, BK=256, num_warps=4, num_stages=4)
    return dict(BN=64, BK=128, num_warps=4, num_stages=4)


@triton_op("vidspec::small_linear", mutates_args=())
def small_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """``F.linear(x, w, b)`` for ``x`` of ``(T, K)`` with ``1 <= T <= 16`` rows (float32 accumulation).

    Args:
        x: ``(T, K)`` activations (made contiguous).
        w: ``(N, K)`` contiguous weight (an ``nn.Linear``'s layout).
        b: ``(N,)`` bias or None.

    Returns:
        ``(T, N)`` in ``x``'s dtype.
    """
    m, k = x.shape
    n = w.shape[0]
    x = x.contiguous()
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    cfg = gemv_config(m, n, k)
    bn = cfg.pop("BN")
    grid = (triton.cdiv(n, bn),)
    bias = b if b is not None else w  # a placeholder pointer, never read without HAS_BIAS
    if m == 1:
        wrap_triton(_gemv_kernel)[grid](x, w, bias, y, n, K=k, HAS_BIAS=b is not None, BN=bn, **cfg)
    else:
        wrap_triton(_small_mm_kernel)[grid](x, w, bias, y, m, n, K=k, HAS_BIAS=b is not None, BM=MAX_ROWS, BN=bn,
                                            **cfg)
    return y


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """:func:`small_linear` when ``x`` has at most :data:`MAX_ROWS` rows and ``w`` is contiguous, else ``F.linear``."""
    if 1 <= x.shape[0] <= MAX_ROWS and x.dim() == 2 and w.is_contiguous():
        return torch.ops.vidspec.small_linear(x, w, b)
    return torch.nn.functional.linear(x, w, b)
