"""Weight products with a fused prologue (``vidspec::rms_linear``, ``vidspec::swiglu_linear``; FastLM ``gemv="fused"``).

CPU (Triton's interpreter, ``TRITON_INTERPRET=1``; skipped without it), fp32:

- each op against its unfused reference (FastLM's ``rms_norm`` then ``F.linear``; ``silu(g) * u`` then
  ``F.linear``) for 1, 3 and 16 rows, with and without bias and residual delta, through the one-row
  kernel, the dot-tile kernel and the split-K kernel (K not a multiple of the blocks, a short last slice);
  the residual sum ``x + delta`` the op returns is exact;
- split-K results are bitwise repeatable and leave the shared counters at 0;
- shapes the Triton path does not take (more than 16 rows, a "cublas" table entry) are the reference;
- a tiny model's FastLM steps through the fused products give the unfused logits (to fp32 rounding)
  and the same greedy tokens as eager AR;
- bad modes are refused by name (FastLM, ``--fast-gemv``).

GPU (opt-in ``-m gpu``): bf16 at Qwen2-7B shapes against cuBLAS within :data:`BF16_TOL`, bitwise
repeatable split-K inside CUDA graphs, a compiled + captured layer piece, and FastTarget ``gemv="fused"``
against ``gemv="all"`` on the tiny models.
"""

from __future__ import annotations

import importlib.util
import json
import os

import pytest
import torch

from vidspec.decoding.engine import SpeculativeDecoder
from vidspec.decoding.types import Request

HAS_TRITON = importlib.util.find_spec("triton") is not None
INTERPRET = HAS_TRITON and os.environ.get("TRITON_INTERPRET") == "1"
needs_interpreter = pytest.mark.skipif(not INTERPRET, reason="fp32 on CPU through Triton's interpreter "
                                                            "(TRITON_INTERPRET=1); on CUDA see the gpu tests below")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
#: fp32 (CPU): max |Δ| <= FP32_TOL * max |ref|
FP32_TOL = 1e-4
#: bf16 at 7B shapes vs cuBLAS: both accumulate in fp32; the fused path also skips the unfused path's
#: bf16 roundings of the normalised (or SwiGLU) activation, so max |Δ| <= BF16_TOL * max |ref|.
BF16_TOL = 1e-2
EPS = 1e-6


def _interpreter():
    """The gemv module, with Triton's interpreter patched as in test_fast_kernels.py (loaded scalars become
    1-element arrays there, which numpy 2 refuses as indices)."""
    import numpy as np
    from triton.runtime import interpreter

    orig = interpreter._patch_lang_tensor
    if not getattr(orig, "_vidspec", False):
        def patched(tensor, scope):
            orig(tensor, scope)
            scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

        patched._vidspec = True  # type: ignore[attr-defined]
        interpreter._patch_lang_tensor = patched
    from vidspec.decoding.fast import gemv

    return gemv


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-6))


def _rms_inputs(m: int, n: int, k: int, bias: bool, delta: bool, seed: int, device="cpu", dtype=torch.float32):
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(m, k, generator=g, device=device).to(dtype)
    d = torch.randn(m, k, generator=g, device=device).to(dtype) if delta else None
    nw = (1 + 0.1 * torch.randn(k, generator=g, device=device)).to(dtype)
    w = (torch.randn(n, k, generator=g, device=device) * k ** -0.5).to(dtype)
    b = torch.randn(n, generator=g, device=device).to(dtype) if bias else None
    return x, d, nw, w, b


def _check_rms(out, ref, x, d, tol):
    (y, s), (ry, rs) = out, ref
    assert y.shape == ry.shape and rel_err(y, ry) <= tol
    assert s.shape == rs.shape == ((0, x.shape[1]) if d is None else x.shape)
    if d is not None:
        assert torch.equal(s, x + d)  # the next residual: exactly the unfused add


# ---- CPU, interpreted --------------------------------------------------------------------------
@needs_interpreter
@pytest.mark.parametrize("m", [1, 3, 16])
@pytest.mark.parametrize("n,k", [(40, 96), (33, 600)])
@pytest.mark.parametrize(("bias", "delta"), [(False, True), (True, True), (True, False)])
def test_rms_linear_matches_unfused(m, n, k, bias, delta):
    """Single-pass kernels (one row: reduction; 2-16 rows: dot tiles) and a 3-way split-K (600 = 256 + 256
    + 88 columns): rms_norm(x + delta) @ W^T + b to fp32 rounding, and x + delta exactly."""
    gemv = _interpreter()
    x, d, nw, w, b = _rms_inputs(m, n, k, bias, delta, seed=m * 100 + n + k)
    ref = gemv.rms_linear_reference(x, d, nw, EPS, w, b)
    assert gemv.gemv_config(m, n, k)["split"] == 1  # the default config: the single-pass kernels
    _check_rms(gemv.rms_linear(x, d, nw, EPS, w, b), ref, x, d, FP32_TOL)
    _check_rms(gemv.split_rms_linear(x, d, nw, EPS, w, b, 16, 64, 3, 4, 2), ref, x, d, FP32_TOL)


@needs_interpreter
@pytest.mark.parametrize("m", [1, 3, 16])
@pytest.mark.parametrize("n,k", [(40, 96), (33, 600)])
@pytest.mark.parametrize("bias", [False, True])
def test_swiglu_linear_matches_unfused(m, n, k, bias):
    """(silu(g) * u) @ W^T + b from gu = [g | u], single-pass and split-K, to fp32 rounding."""
    gemv = _interpreter()
    g = torch.Generator().manual_seed(m * 100 + n + k + 7)
    gu = torch.randn(m, 2 * k, generator=g) * 2
    w = torch.randn(n, k, generator=g) * k ** -0.5
    b = torch.randn(n, generator=g) if bias else None
    ref = gemv.swiglu_linear_reference(gu, w, b)
    assert rel_err(gemv.swiglu_linear(gu, w, b), ref) <= FP32_TOL
    assert rel_err(gemv.split_swiglu_linear(gu, w, b, 16, 64, 3, 4, 2), ref) <= FP32_TOL


@needs_interpreter
@pytest.mark.parametrize(("m", "bm"), [(1, 1), (9, 16)])
def test_prologue_split_k_is_bitwise_repeatable(m, bm):
    """The last-arriver reduction adds partial products and partial sums of squares in slice order: two
    calls are bitwise equal whatever the program order, the counters (shared with vidspec::split_linear
    of the same tile key) are back at 0, and a plain split-K product of that key in between is unaffected."""
    gemv = _interpreter()
    n, k, bn, bk, split = 40, 600, 16, 64, 3
    x, d, nw, w, b = _rms_inputs(m, n, k, True, True, seed=5)
    gu = torch.randn(m, 2 * k, generator=torch.Generator().manual_seed(6))
    first = gemv.split_rms_linear(x, d, nw, EPS, w, b, bn, bk, split, 4, 2)
    sw = gemv.split_swiglu_linear(gu, w, b, bn, bk, split, 4, 2)
    plain = gemv.split_linear(x, w, b, bn, bk, split, 4, 2)
    assert rel_err(plain, torch.nn.functional.linear(x, w, b)) <= FP32_TOL
    again = gemv.split_rms_linear(x, d, nw, EPS, w, b, bn, bk, split, 4, 2)
    assert torch.equal(again[0], first[0]) and torch.equal(again[1], first[1])
    assert torch.equal(gemv.split_swiglu_linear(gu, w, b, bn, bk, split, 4, 2), sw)
    _, cnt = gemv.split_buffers(x.device, -(-n // bn), split, bm, bn)
    assert int(cnt.abs().sum()) == 0


def test_prologue_ops_fall_back_to_the_reference(tmp_path, monkeypatch):
    """More than 16 rows, or a shape whose prologue entry ("NxK+rms", "NxK+swiglu") in the table says
    "cublas": the op is the unfused computation (no kernel). The plain "NxK" product keeps its own config;
    an unknown prologue suffix is a table error."""
    pytest.importorskip("triton")
    from vidspec.decoding.fast import gemv

    x, d, nw, w, b = _rms_inputs(17, 40, 96, True, True, seed=1)
    out, ref = gemv.rms_linear(x, d, nw, EPS, w, b), gemv.rms_linear_reference(x, d, nw, EPS, w, b)
    assert torch.equal(out[0], ref[0]) and torch.equal(out[1], ref[1])
    path = tmp_path / "t.json"
    cfg = {"BN": 16, "BK": 32, "split": 3, "num_warps": 4, "num_stages": 2}
    path.write_text(json.dumps({"m1": {"40x96+rms": "cublas", "40x48+swiglu": "cublas", "40x48": cfg},
                                "m2-16": {"40x96+rms": cfg}}))
    monkeypatch.setenv(gemv.TABLE_ENV, str(path))
    assert gemv.gemv_config(1, 40, 96) == gemv.default_config(1, 40, 96)
    assert gemv.gemv_config(1, 40, 48) == cfg and gemv.gemv_config(1, 40, 48, "rms") == cfg
    assert gemv.gemv_config(3, 40, 96, "rms") == cfg and gemv.gemv_config(3, 40, 96, "swiglu")["split"] == 1
    x1, d1 = x[:1], d[:1]
    assert torch.equal(gemv.rms_linear(x1, d1, nw, EPS, w, b)[0], gemv.rms_linear_reference(x1, d1, nw, EPS, w, b)[0])
    gu = torch.randn(1, 96)
    w2 = torch.randn(40, 48)
    assert torch.equal(gemv.swiglu_linear(gu, w2, None), gemv.swiglu_linear_reference(gu, w2, None))
    path.write_text(json.dumps({"m1": {"40x96+gelu": "cublas"}}))
    with pytest.raises(gemv.GemvTableError, match=r"shape key '40x96\+gelu'"):
        gemv.gemv_config(1, 40, 96)


def _fresh(name: str):
    from vidspec.decoding.models import load_target

    return load_target(name)


@needs_interpreter
def test_fused_gemv_steps_are_token_identical(tiny, clip, monkeypatch):
    """FastLM's steps through the prologue products (the routing of gemv="fused", set past its CUDA check:
    on CPU the kernels run interpreted in fp32; SDPA attention, to keep the test short): verify logits
    equal the unfused fast path's to fp32 rounding, and greedy decoding gives eager AR's tokens. Every
    layer of a step takes two RMSNorm prologues and one SwiGLU prologue; prefill chunks none."""
    from vidspec.decoding.fast import FastTarget

    gemv = _interpreter()
    calls = {"rms_linear": 0, "swiglu_linear": 0}

    def counting(name):
        op = getattr(gemv, name)

        def counted(*args):
            calls[name] += 1
            return op(*args)
        return counted

    for name in calls:
        monkeypatch.setattr(torch.ops.vidspec, name, counting(name))
    name = "tiny-qwen2.5-vl"
    ref = tiny(name)
    req = Request("Describe the video.", clip)
    ar = SpeculativeDecoder(ref).generate(req, max_new_tokens=6)
    plain = FastTarget(_fresh(name), max_len=512, fuse=True, kernels=False)
    fast = FastTarget(_fresh(name), max_len=512, fuse=True, kernels=False)
    fast.lm._set_gemv("fused")
    assert fast.lm.gemv_rows == 16 and fast.lm.gemv_small == "fused"
    s_plain, s = plain.prefill(req), fast.prefill(req)
    assert calls == {"rms_linear": 0, "swiglu_linear": 0}
    toks = [int(s_plain.first_logits.argmax()), 7, 8, 9]
    a, b = plain.verify(s_plain, toks).logits, fast.verify(s, toks).logits
    layers = fast.lm.num_layers
    assert calls == {"rms_linear": 2 * layers, "swiglu_linear": layers}
    assert rel_err(b, a) <= FP32_TOL
    assert SpeculativeDecoder(fast).generate(req, max_new_tokens=6).token_ids == ar.token_ids


def test_bad_gemv_modes_are_refused_by_name(tiny):
    from vidspec.decoding.errors import ConfigError
    from vidspec.decoding.fast.lm import FastLM
    from vidspec.decoding.methods import check_gemv

    target = _fresh("tiny-llava-ov")
    lm, head = target.model.model.language_model, target.model.lm_head
    with pytest.raises(ValueError, match="gemv must be False, True, 'all' or 'fused', got 'prologue'"):
        FastLM(lm, head, max_len=64, gemv="prologue")
    with pytest.raises(ValueError, match="gemv='fused' needs CUDA, Triton, fused weights"):
        FastLM(lm, head, max_len=64, gemv="fused")
    assert check_gemv("fused", "fast", "cuda:0") == "fused"
    with pytest.raises(ConfigError, match="--fast-gemv fused needs --engine fast on a CUDA device"):
        check_gemv("fused", "fast", "cpu")
    with pytest.raises(ConfigError, match=r"unknown --fast-gemv 'prologue' \(choose from off, decode, all, fused\)"):
        check_gemv("prologue", "fast", "cuda")


# ---- GPU ---------------------------------------------------------------------------------------
#: (rows, N, K, config or None for the built-in table's): the Qwen2-7B products that take a prologue.
GPU_RMS = [
    (1, 4608, 3584, None),                                                       # q/k/v, AR step
    (1, 37888, 3584, None),                                                      # gate/up, AR step
    (1, 4608, 3584, dict(BN=16, BK=256, split=2, num_warps=4, num_stages=4)),   # one-row split-K
    (9, 37888, 3584, None),                                                      # gate/up, K=8 verify
    (9, 4608, 3584, dict(BN=64, BK=128, split=7, num_warps=4, num_stages=4)),   # q/k/v, verify split-K
    (16, 4608, 3584, dict(BN=32, BK=64, split=1, num_warps=4, num_stages=4)),   # dot tiles, 16 rows
]
GPU_SWIGLU = [
    (1, 3584, 18944, None),                                                      # down, AR (table: split 4)
    (1, 3584, 18944, dict(BN=8, BK=512, split=1, num_warps=8, num_stages=2)),   # down, no split
    (9, 3584, 18944, None),                                                      # down, verify (split 5)
    (3, 3584, 18944, dict(BN=64, BK=128, split=1, num_warps=4, num_stages=4)),  # dot tiles
]


def _table(tmp_path, monkeypatch, m, n, k, cfg):
    from vidspec.decoding.fast import gemv

    if cfg is None:
        monkeypatch.delenv(gemv.TABLE_ENV, raising=False)
        return
    path = tmp_path / "table.json"
    path.write_text(json.dumps({f"m{m}": {f"{n}x{k}": cfg}}))
    monkeypatch.setenv(gemv.TABLE_ENV, str(path))


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize(("m", "n", "k", "cfg"), GPU_RMS)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("delta", [False, True])
def test_rms_linear_bf16_matches_cublas(tmp_path, monkeypatch, m, n, k, cfg, bias, delta):
    """rms_linear in bf16 at 7B shapes: within BF16_TOL of rms_norm + cuBLAS, x + delta bitwise, repeatable."""
    from vidspec.decoding.fast import gemv

    _table(tmp_path, monkeypatch, m, n, k, cfg)
    x, d, nw, w, b = _rms_inputs(m, n, k, bias, delta, seed=n + k + m, device="cuda", dtype=torch.bfloat16)
    x = x * 4
    ref = gemv.rms_linear_reference(x, d, nw, EPS, w, b)  # FastLM's rms_norm, then cuBLAS
    out = torch.ops.vidspec.rms_linear(x, d, nw, EPS, w, b)
    _check_rms(out, ref, x, d, BF16_TOL)
    again = torch.ops.vidspec.rms_linear(x, d, nw, EPS, w, b)
    assert torch.equal(again[0], out[0])


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize(("m", "n", "k", "cfg"), GPU_SWIGLU)
@pytest.mark.parametrize("bias", [False, True])
def test_swiglu_linear_bf16_matches_cublas(tmp_path, monkeypatch, m, n, k, cfg, bias):
    """swiglu_linear in bf16 at the 7B down-projection shape: within BF16_TOL of silu * up + cuBLAS, repeatable."""
    from vidspec.decoding.fast import gemv

    _table(tmp_path, monkeypatch, m, n, k, cfg)
    g = torch.Generator(device="cuda").manual_seed(n + k + m)
    gu = (torch.randn(m, 2 * k, device="cuda", generator=g) * 2).bfloat16()
    w = (torch.randn(n, k, device="cuda", generator=g) * 0.02).bfloat16()
    b = torch.randn(n, device="cuda", generator=g).bfloat16() if bias else None
    out = torch.ops.vidspec.swiglu_linear(gu, w, b)
    assert rel_err(out, gemv.swiglu_linear_reference(gu, w, b)) <= BF16_TOL
    assert torch.equal(torch.ops.vidspec.swiglu_linear(gu, w, b), out)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("m", [1, 9])
def test_fused_layer_piece_compiled_and_captured(tmp_path, monkeypatch, m):
    """torch.compile(fullgraph) of FastLM's _pre_fused/_post_fused with small="fused" at 7B widths (split-K
    forced on q/k/v and down for one row; the verify table's for 9), then a CUDA graph of the compiled calls:
    within BF16_TOL of the unfused pieces (cuBLAS), and the graph replays bitwise to the eager compiled result."""
    from vidspec.decoding.fast import gemv
    from vidspec.decoding.fast.lm import _post_fused, _pre_fused

    table = {"m1": {"4608x3584": dict(BN=16, BK=256, split=2, num_warps=4, num_stages=4)}}
    (tmp_path / "t.json").write_text(json.dumps(table))
    monkeypatch.setenv(gemv.TABLE_ENV, str(tmp_path / "t.json"))
    d, inter = 3584, 18944
    g = torch.Generator(device="cuda").manual_seed(m)

    def rnd(*shape, scale=0.02):
        return (torch.randn(*shape, device="cuda", generator=g) * scale).bfloat16()

    x, delta, attn = rnd(m, d, scale=1.0), rnd(m, d, scale=0.5), rnd(m, d, scale=1.0)
    in_norm, post_norm = rnd(d, scale=0.1) + 1, rnd(d, scale=0.1) + 1
    wqkv, bqkv, wo, wgu, wd = rnd(4608, d), rnd(4608, scale=0.5), rnd(d, d), rnd(2 * inter, d), rnd(d, inter)

    def layer(small):
        h, qkv = _pre_fused(x, delta, in_norm, EPS, wqkv, bqkv, small)
        h2, mlp = _post_fused(h, attn, wo, None, post_norm, EPS, wgu, wd, small)
        return qkv, h2, mlp

    ref = layer(False)
    cl = torch.compile(layer, fullgraph=True, dynamic=False)
    out = cl("fused")  # the first call outside capture: split-K buffers
    for a, r in zip(out, ref):
        assert rel_err(a, r) <= BF16_TOL
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        gout = cl("fused")
    for _ in range(2):
        graph.replay()
        torch.cuda.synchronize()
        for a, b in zip(gout, out):
            assert torch.equal(a, b)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("name", ["tiny-qwen2.5-vl", "tiny-llava-ov"])
@pytest.mark.parametrize("force_split", [False, True])
def test_fused_gemv_steps_match_all_on_cuda(cuda_tiny, clip, tmp_path, monkeypatch, name, force_split):
    """FastTarget(gemv="fused") (compiled pieces in CUDA graphs) against gemv="all": verify and AR logits
    within bf16 rounding, repeated verify steps bitwise equal, same greedy tokens; with force_split a
    table sends every product through split-K (BK 16, split 2)."""
    from vidspec.decoding.fast import FastTarget, gemv

    target = cuda_tiny(name)
    ref = FastTarget(target, max_len=1024, graphs=True, compile=True, gemv="all")
    if force_split:
        shapes = {f"{w.shape[0]}x{w.shape[1]}" for lw in ref.lm.layers for w in (lw.wqkv, lw.wo, lw.wgu, lw.wd)}
        shapes.add(f"{ref.lm.head.shape[0]}x{ref.lm.head.shape[1]}")
        cfg = {"BN": 16, "BK": 16, "split": 2, "num_warps": 4, "num_stages": 2}
        (tmp_path / "t.json").write_text(json.dumps({"m1": {s: cfg for s in shapes}, "m2-16": {s: cfg for s in shapes}}))
        monkeypatch.setenv(gemv.TABLE_ENV, str(tmp_path / "t.json"))
    fused = FastTarget(target, max_len=1024, graphs=True, compile=True, gemv="fused")
    req = Request("Describe the video.", clip)
    outs = []
    for fast in (ref, fused):
        st = fast.prefill(req)
        toks = [int(st.first_logits.argmax()), 7, 8, 9, 10]
        rows = []
        for _ in range(2):
            rows.append(fast.verify(st, toks).logits.clone())
            fast.rollback(st, st.length - len(toks))
        one = fast.verify(st, toks[:1]).logits.clone()
        outs.append((rows, one, SpeculativeDecoder(fast).generate(req, max_new_tokens=12).token_ids))
    (a_rows, a_one, a_ids), (b_rows, b_one, b_ids) = outs
    for a, b in zip(a_rows, b_rows):
        assert rel_err(b, a) < 5e-2
    assert torch.equal(b_rows[0], b_rows[1])
    assert rel_err(b_one, a_one) < 5e-2
    assert b_ids == a_ids
