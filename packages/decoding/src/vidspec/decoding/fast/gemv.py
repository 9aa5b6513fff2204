"""Triton matrix-vector products for decode and verify steps (``T <= 16`` rows), an opt-in alternative to cuBLAS.

A decode step multiplies one activation row (a verify step a few) by every weight matrix of the
model, so its cost is reading the weights: the product is bound by memory bandwidth, not by
arithmetic. On an H200 at 7B layer shapes, one product at a time, cuBLAS reached 0.5-4.0 TB/s on these
products and simple Triton kernels were faster for most shapes (``benchmarks/gemv_sweep_gpu.py``). Three
kernels:

- ``T == 1``: each program reduces ``BN`` weight rows against the activation row, ``BK`` columns at
  a time (plain loads and a float32 multiply-add, no tensor cores);
- ``2 <= T <= 16``: each program computes a ``(16, BN)`` tile with ``tl.dot`` (rows past T masked);
- split-K (either row count): the grid is ``(cdiv(N, BN), split)``, each program reduces one
  ``K / split`` slice of one output tile and writes its float32 partial to a workspace, then bumps
  the tile's int32 counter (``tl.atomic_add``, acq_rel). The program that sees ``split - 1`` sums the
  ``split`` partials in slice order (so results are bitwise the same run to run, whichever program
  comes last), adds the bias, stores the tile and resets the counter to 0, all in one launch.
  Without it, the o- and down-projections (N = 3584) had 56 programs of 64 columns for 132 SMs
  and the down-projection read K = 18944 serially in each.

All add the bias in the epilogue. In CUDA graphs of whole 7B-shaped steps on an H200, the GEMV made
the AR step 10% faster than cuBLAS (4.34 vs 4.80 ms at 2k context), but a dot-tile kernel without
split-K made the K=8 verify step slower (5.42 vs 4.98 ms); with split-K the verify step is faster than
cuBLAS (4.71 vs 4.85 ms, docs/results.md). FastLM's ``gemv=True`` routes single-token steps only;
``gemv="all"`` routes steps of up to 16 rows (the split-K path).

Block sizes, split and kernel (``"cublas"``: ``F.linear``) per shape come from :func:`gemv_config`: a
JSON table named by ``VIDSPEC_GEMV_TABLE``, else the built-in table measured on an H200 at the 7B
shapes (``assets/gemv_h200.json``), else fixed rules by weight shape. Tables are written by
``benchmarks/gemv_sweep_gpu.py --table-out`` (format in :func:`load_table`). No autotuning at run
time (a graph capture must not time kernels).

Registration: :func:`small_linear` is the custom op ``vidspec::small_linear`` through
``torch.library.triton_op``, so ``torch.compile`` traces into it and keeps its single-launch kernels
inside a compiled piece. Split-K products go through a second op, ``vidspec::split_linear``, a plain
(opaque) ``torch.library.custom_op``: its kernel needs the workspace and the counters, which are
module-level buffers cached per (device, tile count, split, tile shape) and allocated on first use,
and an opaque op lets that Python run at call time with real tensors instead of being traced. The op
is declared non-mutating: its result is a fresh tensor, and the buffers it touches are scratch that it
leaves as it found them (counters back at 0), so no caller can observe the mutation. Consequences:

- the first call of each buffer key must happen outside CUDA-graph capture (FastLM's warm-up runs do
  this); a first call during capture raises, naming the shape, rather than capture a zero-fill that
  an eager call would never see;
- split-K products with the same buffer key must be ordered on one stream (as every product of a
  FastLM step is): two in flight at once on different streams would share the counters.

Import this module only where Triton exists (CUDA, or CPU with ``TRITON_INTERPRET=1`` for tests).
"""

from __future__ import annotations

import json
import math
import os
import re

import torch
import triton
import triton.language as tl
from torch.library import custom_op, triton_op, wrap_triton

#: The largest number of rows the Triton path takes (one ``tl.dot`` tile); longer inputs use cuBLAS.
MAX_ROWS = 16
#: Environment variable naming a JSON table of per-shape configs (see :func:`load_table`).
TABLE_ENV = "VIDSPEC_GEMV_TABLE"
#: Programs the default split-K configs aim for: about 4 per SM of an H200 (132 SMs).
TARGET_PROGRAMS = 4 * 132
#: The shortest K slice a default split gives one program (enough loads in flight per program).
MIN_K_SLICE = 512


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


@triton.jit
def _split_k_kernel(x_ptr, w_ptr, b_ptr, y_ptr, ws_ptr, cnt_ptr, M, N, K: tl.constexpr, K_SLICE: tl.constexpr,
                    SPLIT: tl.constexpr, HAS_BIAS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                    BK: tl.constexpr):
    """Program (n, s): columns ``[n BN, (n+1) BN)`` over ``K`` slice ``s``; ``BM == 1``: one row, no dot.

    Workspace layout ``(tiles, SPLIT, BM, BN) float32``; counters ``(tiles,) int32``, 0 between calls.
    """
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    rn = pid_n * BN + tl.arange(0, BN)
    rm = tl.arange(0, BM)
    k_lo = pid_s * K_SLICE
    live = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm[:, None] * BN + tl.arange(0, BN)[None, :]
    tile_ws = ws_ptr + pid_n * (SPLIT * BM * BN)
    if BM == 1:
        acc1 = tl.zeros((BN, BK), dtype=tl.float32)
        for k0 in range(0, K_SLICE, BK):
            rk = k_lo + k0 + tl.arange(0, BK)
            kin = rk < K
            w = tl.load(w_ptr + rn[:, None] * K + rk[None, :], mask=(rn[:, None] < N) & kin[None, :], other=0.0)
            x = tl.load(x_ptr + rk, mask=kin, other=0.0)
            acc1 += w.to(tl.float32) * x.to(tl.float32)[None, :]
        part = tl.sum(acc1, 1)[None, :]
    else:
        part = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K_SLICE, BK):
            rk = k_lo + k0 + tl.arange(0, BK)
            kin = rk < K
            x = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & kin[None, :], other=0.0)
            w = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rn[None, :] < N) & kin[:, None], other=0.0)
            part += tl.dot(x, w)
    tl.store(tile_ws + pid_s * (BM * BN) + offs, part, mask=live)
    # Every thread's partial is stored before the (single-thread) release of the counter update.
    tl.debug_barrier()
    seen = tl.atomic_add(cnt_ptr + pid_n, 1, sem="acq_rel")
    if seen == SPLIT - 1:  # the last slice of this tile to finish: reduce in slice order, then reset
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for s in tl.static_range(SPLIT):
            acc += tl.load(tile_ws + s * (BM * BN) + offs, mask=live, other=0.0, cache_modifier=".cg")
        if HAS_BIAS:
            acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
        tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc.to(y_ptr.dtype.element_ty), mask=live)
        tl.atomic_xchg(cnt_ptr + pid_n, 0)


# ---- configs -----------------------------------------------------------------------------------
_CFG_KEYS = ("BN", "BK", "split", "num_warps", "num_stages")
_CLASS_RE = re.compile(r"^m(?:(\d+)|(2-16))$")
_SHAPE_RE = re.compile(r"^(\d+)x(\d+)$")


class GemvTableError(ValueError):
    """A ``VIDSPEC_GEMV_TABLE`` file that cannot be used (the message names the file, entry and problem)."""


def _split_for(tiles: int, k: int, bk: int) -> int:
    """Default split: about :data:`TARGET_PROGRAMS` programs, K slices no shorter than :data:`MIN_K_SLICE`."""
    split = max(1, min(math.ceil(TARGET_PROGRAMS / tiles), k // MIN_K_SLICE))
    return _effective_split(k, bk, split)


def _effective_split(k: int, bk: int, split: int) -> int:
    """The number of non-empty ``BK``-aligned slices ``split`` gives (``K_SLICE = ceil(k / split)`` rounded up to BK)."""
    return math.ceil(k / _k_slice(k, bk, split))


def _k_slice(k: int, bk: int, split: int) -> int:
    return math.ceil(math.ceil(k / split) / bk) * bk


def default_config(m: int, n: int, k: int) -> dict:
    """The rule-based config for an ``(m, k) x (k, n)`` product: shapes in neither table (at the 7B shapes
    the built-in measured table, :data:`BUILTIN_TABLE`, takes precedence).

    ``m == 1`` (from an H200 sweep at 7B shapes, where splitting did not pay): ``BN`` 16 for narrow outputs
    (q/k/v, o), 4 for wide ones with long rows (gate/up, down), 8 for LM heads; ``BK`` 512 when it
    divides ``k``. ``m > 1``: ``(16, BN)`` dot tiles, ``BN`` 64 (32 for LM heads), split-K by
    reasoning (the H200 sweep chose splits of 5-7 at these shapes): enough slices for about :data:`TARGET_PROGRAMS` programs (4 per
    H200 SM) with slices of at least :data:`MIN_K_SLICE` columns, so at 7B shapes q/k/v (72 tiles)
    and o (56 tiles) split 7 ways, down (56 tiles, K = 18944) 10 ways, gate/up (592 tiles) and the
    head not at all.
    """
    bk = 512 if k % 512 == 0 else 256
    if m == 1:
        if n <= 8192:
            return dict(BN=16, BK=bk, split=1, num_warps=4, num_stages=4)
        if n >= 65536:
            return dict(BN=8, BK=bk, split=1, num_warps=4, num_stages=2)
        return dict(BN=4, BK=bk, split=1, num_warps=8 if k > 8192 else 4, num_stages=2)
    if n >= 65536:
        return dict(BN=32, BK=256, split=1, num_warps=4, num_stages=4)
    return dict(BN=64, BK=128, split=_split_for(triton.cdiv(n, 64), k, 128), num_warps=4, num_stages=4)


def _check_entry(where: str, m_class: str, entry) -> dict | str:
    if entry == "cublas":
        return entry
    if not isinstance(entry, dict):
        raise GemvTableError(f"{where}: expected \"cublas\" or an object with {', '.join(_CFG_KEYS)}, "
                             f"got {entry!r}")
    extra = sorted(k for k in entry if k not in _CFG_KEYS and not k.startswith("_"))
    missing = [k for k in _CFG_KEYS if k not in entry]
    if extra or missing:
        raise GemvTableError(f"{where}: " + "; ".join(
            ([f"unknown field(s) {extra} (notes go in fields starting with '_')"] if extra else [])
            + ([f"missing field(s) {missing}"] if missing else [])))
    for key in _CFG_KEYS:
        v = entry[key]
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise GemvTableError(f"{where}: {key} must be a positive integer, got {v!r}")
    for key in ("BN", "BK", "num_warps"):
        if entry[key] & (entry[key] - 1):
            raise GemvTableError(f"{where}: {key} must be a power of two, got {entry[key]}")
    if m_class != "m1" and min(entry["BN"], entry["BK"]) < 16:
        raise GemvTableError(f"{where}: BN and BK must be >= 16 for more than one row (tl.dot tiles), "
                             f"got BN={entry['BN']} BK={entry['BK']}")
    return {k: entry[k] for k in _CFG_KEYS}


def parse_table(data, source: str = "table") -> dict[str, dict[str, dict | str]]:
    """Validate a decoded table; returns ``{m_class: {"NxK": config or "cublas"}}``.

    Format (JSON)::

        {"m1":    {"3584x3584": {"BN": 16, "BK": 512, "split": 2, "num_warps": 4, "num_stages": 4}},
         "m2-16": {"3584x18944": "cublas", "4608x3584": {...}},
         "m9":    {...},
         "_meta": {...}}

    Row classes: ``m<T>`` for exactly T rows (1..16), ``m2-16`` for any 2..16 rows (used when no
    ``m<T>`` entry has the shape). Shapes are ``<N>x<K>`` of the ``(N, K)`` weight. Top-level keys and
    entry fields starting with ``_`` are notes, ignored. Raises :class:`GemvTableError` on the first
    problem, naming it.
    """
    if not isinstance(data, dict):
        raise GemvTableError(f"{source}: the top level must be an object keyed by row class, got {type(data).__name__}")
    out: dict[str, dict[str, dict | str]] = {}
    for m_class, shapes in data.items():
        if m_class.startswith("_"):
            continue
        mt = _CLASS_RE.match(m_class)
        if not mt or (mt.group(1) and not 1 <= int(mt.group(1)) <= MAX_ROWS):
            raise GemvTableError(f"{source}: row class {m_class!r} is not m1..m{MAX_ROWS} or m2-16")
        if not isinstance(shapes, dict):
            raise GemvTableError(f"{source}: {m_class} must map \"NxK\" shapes to configs, got {type(shapes).__name__}")
        out[m_class] = {}
        for shape, entry in shapes.items():
            if not _SHAPE_RE.match(shape):
                raise GemvTableError(f"{source}: {m_class}: shape key {shape!r} is not \"<N>x<K>\"")
            out[m_class][shape] = _check_entry(f"{source}: {m_class} / {shape}", m_class, entry)
    return out


def load_table(path: str | os.PathLike) -> dict[str, dict[str, dict | str]]:
    """Read and validate a JSON table (see :func:`parse_table`); :class:`GemvTableError` on any problem."""
    src = f"{TABLE_ENV}={path}"
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise GemvTableError(f"{src}: cannot read it ({e.strerror or e})") from None
    except json.JSONDecodeError as e:
        raise GemvTableError(f"{src}: not valid JSON ({e})") from None
    return parse_table(data, src)


_tables: dict[tuple[str, float], dict] = {}


def active_table() -> dict | None:
    """The table named by ``VIDSPEC_GEMV_TABLE`` (validated, cached by path and mtime), or None when unset."""
    path = os.environ.get(TABLE_ENV)
    if not path:
        return None
    try:
        key = (path, os.stat(path).st_mtime)
    except OSError:
        key = (path, -1.0)
    if key not in _tables:
        _tables[key] = load_table(path)
    return _tables[key]


#: The built-in table: the fastest configs of an H200 sweep at the Qwen2-7B shapes (the
#: language model of Qwen2.5-VL-7B and LLaVA-OneVision-7B), rows 1 and 2-16.
BUILTIN_TABLE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "assets", "gemv_h200.json")
_builtin: dict | None = None


def builtin_table() -> dict:
    """:data:`BUILTIN_TABLE`, validated once."""
    global _builtin
    if _builtin is None:
        with open(BUILTIN_TABLE) as f:
            _builtin = parse_table(json.load(f), BUILTIN_TABLE)
    return _builtin


def gemv_config(m: int, n: int, k: int) -> dict | str:
    """The config of an ``(m, k) x (k, n)`` product with ``1 <= m <= 16``: a dict of ``BN``, ``BK``,
    ``split``, ``num_warps``, ``num_stages`` (a fresh copy), or ``"cublas"`` (use ``F.linear``).

    From the ``VIDSPEC_GEMV_TABLE`` table when it has the shape, else from the built-in table
    (:data:`BUILTIN_TABLE`, measured on an H200) when it has it, else :func:`default_config`. In a
    table, row class ``m<m>`` comes first, then ``m2-16``.
    """
    shape = f"{n}x{k}"
    for table in (active_table(), builtin_table()):
        if not table:
            continue
        for m_class in (f"m{m}", "m2-16" if m > 1 else None):
            entry = table.get(m_class, {}).get(shape) if m_class else None
            if entry is not None:
                return entry if entry == "cublas" else dict(entry)
    return default_config(m, n, k)


# ---- split-K buffers and launches ------------------------------------------------------------------
_buffers: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def split_buffers(device: torch.device, tiles: int, split: int, bm: int, bn: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``(tiles * split * bm * bn,) float32`` workspace and ``(tiles,) int32`` zeroed counters for one key.

    Allocated on first use and kept for the process (reused by every later call and graph replay of
    that key). A first use during CUDA-graph capture raises: the zero-fill would be captured, not run.
    """
    key = (device.type, device.index, tiles, split, bm, bn)
    bufs = _buffers.get(key)
    if bufs is None:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"vidspec::split_linear: first call for {tiles} tiles x split {split} (tile {bm}x{bn}) "
                               "inside CUDA-graph capture; run the product once outside capture first (a warm-up)")
        bufs = (torch.empty(tiles * split * bm * bn, dtype=torch.float32, device=device),
                torch.zeros(tiles, dtype=torch.int32, device=device))
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # the zero-fill is done before any stream uses the counters
        _buffers[key] = bufs
    return bufs


def launch(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, y: torch.Tensor, cfg: dict,
           wrap: bool = False) -> None:
    """``y = x @ w.T (+ b)`` with the kernel ``cfg`` picks (a config dict, not ``"cublas"``).

    ``x`` ``(M, K)`` contiguous, ``w`` ``(N, K)`` contiguous, ``y`` ``(M, N)``. ``wrap``: launch the
    single-pass kernels through ``wrap_triton`` (inside the triton_op, so torch.compile can trace them).
    """
    m, k = x.shape
    n = w.shape[0]
    bn, bk, split = cfg["BN"], cfg["BK"], cfg["split"]
    meta = dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    bias = b if b is not None else w  # a placeholder pointer, never read without HAS_BIAS
    tiles = triton.cdiv(n, bn)
    if split > 1:
        split = _effective_split(k, bk, split)
    if split > 1:
        bm = 1 if m == 1 else MAX_ROWS
        ws, cnt = split_buffers(x.device, tiles, split, bm, bn)
        _split_k_kernel[(tiles, split)](x, w, bias, y, ws, cnt, m, n, K=k, K_SLICE=_k_slice(k, bk, split), SPLIT=split,
                                        HAS_BIAS=b is not None, BM=bm, BN=bn, BK=bk, **meta)
    elif m == 1:
        (wrap_triton(_gemv_kernel) if wrap else _gemv_kernel)[(tiles,)](
            x, w, bias, y, n, K=k, HAS_BIAS=b is not None, BN=bn, BK=bk, **meta)
    else:
        (wrap_triton(_small_mm_kernel) if wrap else _small_mm_kernel)[(tiles,)](
            x, w, bias, y, m, n, K=k, HAS_BIAS=b is not None, BM=MAX_ROWS, BN=bn, BK=bk, **meta)


@custom_op("vidspec::split_linear", mutates_args=())
def split_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, bn: int, bk: int, split: int,
                 num_warps: int, num_stages: int) -> torch.Tensor:
    """The split-K product (opaque to torch.compile; see the module docstring on its cached buffers).

    ``x`` ``(T, K)`` contiguous with ``1 <= T <= 16``, ``w`` ``(N, K)`` contiguous, ``b`` ``(N,)`` or
    None; returns ``(T, N)`` in ``x``'s dtype.
    """
    y = torch.empty((x.shape[0], w.shape[0]), dtype=x.dtype, device=x.device)
    launch(x, w, b, y, dict(BN=bn, BK=bk, split=split, num_warps=num_warps, num_stages=num_stages))
    return y


@split_linear.register_fake
def _(x, w, b, bn, bk, split, num_warps, num_stages):
    return x.new_empty((x.shape[0], w.shape[0]))


@triton_op("vidspec::small_linear", mutates_args=())
def small_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """``F.linear(x, w, b)`` for ``x`` of ``(T, K)`` with ``1 <= T <= 16`` rows (float32 accumulation).

    The kernel (or cuBLAS) and its block sizes come from :func:`gemv_config`; split-K configs go
    through ``vidspec::split_linear``.

    Args:
        x: ``(T, K)`` activations (made contiguous).
        w: ``(N, K)`` contiguous weight (an ``nn.Linear``'s layout).
        b: ``(N,)`` bias or None.

    Returns:
        ``(T, N)`` in ``x``'s dtype.
    """
    m, k = x.shape
    n = w.shape[0]
    cfg = gemv_config(m, n, k)
    if cfg == "cublas":
        return torch.nn.functional.linear(x, w, b)
    x = x.contiguous()
    if cfg["split"] > 1 and _effective_split(k, cfg["BK"], cfg["split"]) > 1:
        return torch.ops.vidspec.split_linear(x, w, b, cfg["BN"], cfg["BK"], cfg["split"], cfg["num_warps"],
                                              cfg["num_stages"])
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    launch(x, w, b, y, cfg, wrap=True)
    return y


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """:func:`small_linear` when ``x`` has at most :data:`MAX_ROWS` rows and ``w`` is contiguous, else ``F.linear``."""
    if 1 <= x.shape[0] <= MAX_ROWS and x.dim() == 2 and w.is_contiguous():
        return torch.ops.vidspec.small_linear(x, w, b)
    return torch.nn.functional.linear(x, w, b)
