"""Fused weights, the Triton step kernels and the reduced draft head of the fast path, on CPU.

- Weight fusion re-points the HF modules' parameters into one buffer per layer: the HF module must
  compute exactly what it computed before, no second copy may exist, and the fast path on fused
  weights must stay token-identical to eager AR.
- The Triton kernels (RoPE + KV write, split-K attention) run on CPU through Triton's interpreter
  when ``TRITON_INTERPRET=1`` and Triton is installed (skipped otherwise; on CUDA they run natively
  and ``test_fast_gpu.py`` covers them end to end).
- A reduced-vocabulary head (``head_ids``) returns target token ids.
"""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

from vidspec.decoding.fast import FastModelDrafter, FastStrictVerifier, FastTarget
from vidspec.decoding.fast.lm import (
    FastLM,
    attend_step,
    fuse_layer_weights,
    rope_tables,
    rotate_half,
    step_mask,
)
from vidspec.decoding.loops.chain import SpeculativeDecoder
from vidspec.decoding.types import Request

N = 24
TOL = 1e-4

HAS_TRITON = importlib.util.find_spec("triton") is not None
RUN_KERNELS = HAS_TRITON and (torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1")
needs_kernels = pytest.mark.skipif(not RUN_KERNELS, reason="needs Triton (CUDA, or TRITON_INTERPRET=1 on CPU)")
needs_interpreter = pytest.mark.skipif(not (HAS_TRITON and os.environ.get("TRITON_INTERPRET") == "1"),
                                       reason="fp32 on CPU through Triton's interpreter; on CUDA see test_fast_gpu.py")


def _patch_interpreter() -> None:
    """Triton's interpreter turns loaded scalars into 1-element arrays, which numpy 2 refuses as indices."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    import numpy as np
    from triton.runtime import interpreter

    orig = interpreter._patch_lang_tensor
    if getattr(orig, "_vidspec", False):
        return

    def patched(tensor, scope):
        orig(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

    patched._vidspec = True  # type: ignore[attr-defined]
    interpreter._patch_lang_tensor = patched


def fresh(name: str):
    """A private copy of a tiny model (fusion changes parameters in place; the shared fixture stays untouched)."""
    from vidspec.decoding.models import load_target

    return load_target(name)


def test_fusion_keeps_the_hf_module_and_makes_no_copy():
    target = fresh("tiny-qwen2.5-vl")
    lm = target.model.model.language_model
    x = torch.randn(1, 5, lm.config.hidden_size)
    layer = lm.layers[0]
    pos = torch.arange(5)[None].expand(3, 1, 5)
    with torch.no_grad():
        pe = lm.rotary_emb(x, pos)
        before = layer(x, position_embeddings=pe, attention_mask=None)
        before = before[0] if isinstance(before, tuple) else before
        params_before = {n: p.detach().clone() for n, p in layer.named_parameters()}
        ids_before = {n: id(p) for n, p in layer.named_parameters()}
        fuse_layer_weights(layer)
        after = layer(x, position_embeddings=pe, attention_mask=None)
        after = after[0] if isinstance(after, tuple) else after
    assert torch.equal(before, after)
    for n, p in layer.named_parameters():
        assert id(p) == ids_before[n] and torch.equal(p, params_before[n])
    a, m = layer.self_attn, layer.mlp
    buf = a._vidspec_wqkv
    for p in (a.q_proj.weight, a.k_proj.weight, a.v_proj.weight):
        assert p.untyped_storage().data_ptr() == buf.untyped_storage().data_ptr()
    assert m.gate_proj.weight.untyped_storage().data_ptr() == m._vidspec_wgu.untyped_storage().data_ptr()
    assert torch.equal(buf, torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]))
    fuse_layer_weights(layer)  # twice: no-op
    assert a._vidspec_wqkv is buf


@pytest.mark.parametrize(("name", "k"), [("tiny-qwen2.5-vl", 3), ("tiny-llava-ov", 4)])
def test_fused_fast_path_is_token_identical(tiny, clip, name, k):
    ref = tiny(name)
    req = Request("What happens in this video?", clip)
    ar = SpeculativeDecoder(ref).generate(req, max_new_tokens=N)
    target = fresh(name)
    fast = FastTarget(target, max_len=512, fuse=True)
    assert fast.lm.fused and fast.lm.layers[0].wqkv is not None
    s_ref, s = ref.prefill(req), fast.prefill(req)
    assert (s.first_logits - s_ref.first_logits).abs().max() < TOL
    toks = [int(s_ref.first_logits.argmax()), 7, 8, 9]
    assert (fast.verify(s, toks).logits - ref.verify(s_ref, toks).logits).abs().max() < TOL
    assert SpeculativeDecoder(FastTarget(target, max_len=512, fuse=True)).generate(req, max_new_tokens=N).token_ids \
        == ar.token_ids
    draft = fresh(name)
    with torch.no_grad():
        torch.manual_seed(3)
        draft.model.lm_head.weight.add_(0.6 * torch.randn_like(draft.model.lm_head.weight))
    dec = SpeculativeDecoder(FastTarget(target, max_len=512, fuse=True),
                             FastModelDrafter(FastTarget(draft, max_len=512, fuse=True)), FastStrictVerifier(), k=k)
    assert dec.generate(req, max_new_tokens=N).token_ids == ar.token_ids


def test_reduced_head_returns_target_ids():
    target = fresh("tiny-llava-ov")
    lm, head = target.model.model.language_model, target.model.lm_head
    full = FastLM(lm, head, max_len=128)
    keep = torch.randperm(head.out_features, generator=torch.Generator().manual_seed(0))[: head.out_features // 2]
    small = torch.nn.Linear(head.in_features, keep.numel(), bias=False)
    with torch.no_grad():
        small.weight.copy_(head.weight[keep])
    red = FastLM(lm, small, max_len=128, head_ids=keep)
    for f in (full, red):
        f.new_cache()
        f.prefill_chunk(torch.randn(10, f.d, generator=torch.Generator().manual_seed(1)) * 0.5,
                        torch.arange(10)[None].expand(3, 10), 0, want_hidden=False, last_logits=False)
    tril = torch.ones(3, 3, dtype=torch.bool).tril()
    a = full.step([5, 6, 7], 10, 10, 0, [0, 1, 2], tril)
    b = red.step([5, 6, 7], 10, 10, 0, [0, 1, 2], tril)
    assert b.logits.shape == (3, keep.numel())
    assert torch.allclose(b.logits, a.logits[:, keep], atol=1e-5)
    want = keep[a.logits[:, keep].argmax(-1)]
    assert b.argmax.tolist() == want.tolist()
    assert all(int(t) in set(keep.tolist()) for t in b.argmax)
    with pytest.raises(ValueError, match="head_ids"):
        FastLM(lm, small, max_len=16, head_ids=keep[:3])


@needs_kernels
@pytest.mark.parametrize(("start", "base", "t", "r"), [(40, 40, 1, 1), (100, 100, 9, 9), (150, 140, 4, 14),
                                                        (7, 7, 3, 3), (700, 690, 6, 64)])
def test_kernels_match_reference(start, base, t, r):
    _patch_interpreter()
    from vidspec.decoding.fast.kernels import decode_attention, rope_kv_write

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator().manual_seed(start)
    hq, hkv, hd, cap = 8, 2, 32, 800
    kv = torch.randn(2, cap, hkv, hd, generator=g)
    qkv = torch.randn(t, (hq + 2 * hkv) * hd, generator=g)
    depth = torch.arange(start - base, start - base + t)
    inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
    cos, sin = rope_tables((base + depth)[None].expand(3, t), inv, 1.0, None, torch.float32)
    tm = torch.rand(t, r, generator=g) < 0.5
    tm[torch.arange(t), depth] = True
    tm[:, start - base + t:] = False
    arena = torch.tensor([start, base, 0])
    kc, vc = kv[0].clone().to(dev), kv[1].clone().to(dev)
    q = rope_kv_write(qkv.to(dev), cos.to(dev), sin.to(dev), kc, vc, arena.to(dev), hq, hkv, hd)
    qr, kr, vr = qkv.split([hq * hd, hkv * hd, hkv * hd], -1)
    qr, kr, vr = qr.reshape(t, hq, hd), kr.reshape(t, hkv, hd), vr.reshape(t, hkv, hd)
    c, s = cos[:, None], sin[:, None]
    qr, kr = qr * c + rotate_half(qr) * s, kr * c + rotate_half(kr) * s
    kref, vref = kv[0].clone(), kv[1].clone()
    kref[start:start + t], vref[start:start + t] = kr, vr
    assert (q.cpu() - qr).abs().max() < 1e-5
    assert (kc.cpu() - kref).abs().max() < 1e-5 and (vc.cpu() - vref).abs().max() < 1e-5
    lb = start + t
    m = step_mask(t, lb, torch.tensor(base), tm, torch.float32)
    rep = hq // hkv
    want = attend_step(qr, kref[:lb], vref[:lb], m[None].expand(rep, t, lb).reshape(rep * t, lb), hd ** -0.5)
    for ns in (1, 4, 16):
        got = decode_attention(q, kc, vc, tm.to(dev), arena.to(dev), hd ** -0.5, n_splits=ns, block_n=16)
        assert (got.cpu() - want).abs().max() < 1e-4, ns


@pytest.mark.skipif(not (HAS_TRITON and os.environ.get("TRITON_INTERPRET") == "1"),
                    reason="CPU models through Triton's interpreter (TRITON_INTERPRET=1); on CUDA see test_fast_gpu.py")
def test_kernel_steps_token_identical(tiny, clip):
    """FastTarget with the Triton step kernels (interpreted on CPU): same logits, same tokens."""
    _patch_interpreter()
    name = "tiny-qwen2.5-vl"
    ref = tiny(name)
    req = Request("Describe the video.", clip)
    ar = SpeculativeDecoder(ref).generate(req, max_new_tokens=8)
    fast = FastTarget(fresh(name), max_len=512, fuse=True, kernels=True)
    assert fast.lm.kernels
    s_ref, s = ref.prefill(req), fast.prefill(req)
    toks = [int(s_ref.first_logits.argmax()), 7, 8, 9]
    assert (fast.verify(s, toks).logits - ref.verify(s_ref, toks).logits).abs().max() < TOL
    assert SpeculativeDecoder(fast).generate(req, max_new_tokens=8).token_ids == ar.token_ids


def test_two_stage_argmax_equals_argmax():
    from vidspec.decoding.fast.lm import argmax_rows

    g = torch.Generator().manual_seed(0)
    for _ in range(50):  # many ties: the first maximum must win, as in argmax
        x = torch.randint(0, 4, (3, 640), generator=g).float()
        assert torch.equal(argmax_rows(x), x.argmax(-1))
    x = torch.randn(9, 1000, generator=g)  # not divisible by the groups: plain argmax
    assert torch.equal(argmax_rows(x), x.argmax(-1))


@needs_kernels
@pytest.mark.parametrize("m", [1, 3, 16])
@pytest.mark.parametrize("n,k", [(40, 64), (70, 96), (33, 600)])
@pytest.mark.parametrize("bias", [False, True])
def test_small_linear_matches_linear(m, n, k, bias):
    """The Triton small-M products (one row: reduction kernel; 2-16 rows: dot tiles) equal F.linear, bias included."""
    _patch_interpreter()
    from vidspec.decoding.fast import gemv

    g = torch.Generator().manual_seed(m * 1000 + n + k)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(m, k, generator=g).to(dev)
    w = torch.randn(n, k, generator=g).to(dev)
    b = torch.randn(n, generator=g).to(dev) if bias else None
    if dev == "cuda":  # the kernels are meant for half precision there (tl.dot on fp32 would use TF32)
        x, w, b = x.bfloat16(), w.bfloat16(), (b.bfloat16() if bias else None)
    ref = torch.nn.functional.linear(x.float(), w.float(), None if b is None else b.float())
    out = gemv.small_linear(x, w, b).float()
    assert out.shape == (m, n)
    assert float((out - ref).abs().max()) <= (1e-4 if dev == "cpu" else 2e-2) * float(ref.abs().max())
    # rows past 16 are not the kernels' job: the dispatcher hands them to F.linear
    big = torch.randn(17, k, generator=g).to(dev, x.dtype)
    assert torch.equal(gemv.linear(big, w, b), torch.nn.functional.linear(big, w, b))


def test_gemv_option_is_refused_off_cuda(tiny):
    """gemv=True needs CUDA, Triton, fused weights and half precision: on CPU it fails at construction, by name."""
    target = fresh("tiny-qwen2.5-vl")
    with pytest.raises(ValueError, match="gemv=True needs CUDA"):
        FastLM(target.model.model.language_model, target.model.lm_head, max_len=64, gemv=True)


@needs_interpreter
@pytest.mark.parametrize(("m", "n", "k", "split", "bn", "bk"), [
    (1, 40, 600, 3, 16, 64),   # one row (no dot), N and K not multiples of the blocks, a short last slice
    (9, 70, 600, 4, 32, 64),   # a K=8 verify step's rows
    (16, 33, 200, 2, 16, 32),
    (3, 64, 96, 5, 64, 16),    # split 5 of 96 columns in 16-blocks: 3 non-empty slices
])
@pytest.mark.parametrize("bias", [False, True])
def test_split_k_matches_linear_and_is_deterministic(m, n, k, split, bn, bk, bias):
    """The split-K kernel equals F.linear (fp32), twice bitwise alike, and leaves its counters at 0."""
    _patch_interpreter()
    from vidspec.decoding.fast import gemv

    g = torch.Generator().manual_seed(m * 1000 + n + k + split)
    x, w = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g)
    b = torch.randn(n, generator=g) if bias else None
    ref = torch.nn.functional.linear(x, w, b)
    first = gemv.split_linear(x, w, b, bn, bk, split, 4, 2)
    assert float((first - ref).abs().max()) <= 1e-4 * float(ref.abs().max())
    eff = gemv._effective_split(k, bk, split)
    assert eff > 1
    _, cnt = gemv.split_buffers(x.device, -(-n // bn), eff, 1 if m == 1 else gemv.MAX_ROWS, bn)
    assert int(cnt.abs().sum()) == 0  # reset by each tile's last program: the next call starts from 0
    assert torch.equal(gemv.split_linear(x, w, b, bn, bk, split, 4, 2), first)


def test_default_configs_split_narrow_verify_products():
    """Defaults at Qwen2.5-7B shapes: single rows unchanged (no split); verify rows split the narrow
    products to about 4 programs per H200 SM and leave gate/up and the head unsplit."""
    pytest.importorskip("triton")
    from vidspec.decoding.fast import gemv

    for n, k in [(4608, 3584), (3584, 3584), (37888, 3584), (3584, 18944), (152064, 3584)]:
        assert gemv.default_config(1, n, k)["split"] == 1
    splits = {nk: gemv.default_config(9, *nk)["split"] for nk in [(4608, 3584), (3584, 3584), (3584, 18944),
                                                                 (37888, 3584), (152064, 3584)]}
    assert splits == {(4608, 3584): 7, (3584, 3584): 7, (3584, 18944): 10, (37888, 3584): 1, (152064, 3584): 1}


def test_builtin_table_is_the_measured_sweep_and_the_env_table_wins(tmp_path, monkeypatch):
    """The packaged H200 table parses and gives the 7B shapes their measured configs (the q/k/v verify
    product on cuBLAS); other shapes get the rules; VIDSPEC_GEMV_TABLE comes first."""
    pytest.importorskip("triton")
    import json

    from vidspec.decoding.fast import gemv

    monkeypatch.delenv(gemv.TABLE_ENV, raising=False)
    table = gemv.builtin_table()
    assert set(table) == {"m1", "m2-16"} and len(table["m1"]) == 5 and len(table["m2-16"]) == 5
    assert gemv.gemv_config(9, 4608, 3584) == "cublas"
    assert gemv.gemv_config(9, 3584, 18944) == table["m2-16"]["3584x18944"]
    assert gemv.gemv_config(1, 3584, 18944)["split"] == table["m1"]["3584x18944"]["split"]
    assert gemv.gemv_config(9, 48, 96) == gemv.default_config(9, 48, 96)
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"m2-16": {"4608x3584": {"BN": 64, "BK": 128, "split": 2, "num_warps": 4,
                                                        "num_stages": 4}}}))
    monkeypatch.setenv(gemv.TABLE_ENV, str(path))
    assert gemv.gemv_config(9, 4608, 3584)["split"] == 2
    assert gemv.gemv_config(9, 3584, 18944) == table["m2-16"]["3584x18944"]  # not in the env table


@needs_interpreter
def test_gemv_table_overrides_defaults(tmp_path, monkeypatch):
    """VIDSPEC_GEMV_TABLE: exact row classes win over m2-16, "cublas" means F.linear, other shapes keep the defaults."""
    _patch_interpreter()
    import json

    from vidspec.decoding.fast import gemv

    cfg = {"BN": 16, "BK": 32, "split": 3, "num_warps": 4, "num_stages": 2, "_ms": 0.01}
    path = tmp_path / "table.json"
    path.write_text(json.dumps({"_meta": {"gpu": "test"}, "m1": {"40x96": cfg}, "m2-16": {"40x96": "cublas"},
                                "m5": {"40x96": dict(cfg, split=2)}}))
    monkeypatch.setenv(gemv.TABLE_ENV, str(path))
    assert gemv.gemv_config(1, 40, 96) == {k: cfg[k] for k in gemv._CFG_KEYS}
    assert gemv.gemv_config(5, 40, 96)["split"] == 2
    assert gemv.gemv_config(9, 40, 96) == "cublas"
    assert gemv.gemv_config(9, 48, 96) == gemv.default_config(9, 48, 96)
    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(40, 96, generator=g), torch.randn(40, generator=g)
    for m in (1, 5, 9):
        x = torch.randn(m, 96, generator=g)
        ref = torch.nn.functional.linear(x, w, b)
        out = gemv.small_linear(x, w, b)
        if m == 9:
            assert torch.equal(out, ref)
        else:
            assert float((out - ref).abs().max()) <= 1e-4 * float(ref.abs().max())


@pytest.mark.parametrize(("table", "problem"), [
    ({"m1": {"40x96": {"BN": 16, "BK": 32, "split": 2, "num_warps": 4}}}, r"m1 / 40x96: missing field\(s\) \['num_stages'\]"),
    ({"m1": {"40x96": {"BN": 48, "BK": 32, "split": 2, "num_warps": 4, "num_stages": 2}}}, "BN must be a power of two"),
    ({"m9": {"40x96": {"BN": 8, "BK": 32, "split": 2, "num_warps": 4, "num_stages": 2}}}, "must be >= 16"),
    ({"m1": {"40x96": {"BN": 16, "BK": 32, "split": 0, "num_warps": 4, "num_stages": 2}}}, "split must be a positive"),
    ({"m1": {"40x96": {"BN": 16, "BK": 32, "split": 2, "num_warps": 4, "num_stages": 2, "warps": 8}}},
     r"unknown field\(s\) \['warps'\]"),
    ({"m17": {}}, "row class 'm17'"),
    ({"m1": {"40-96": "cublas"}}, "shape key '40-96'"),
    ({"m1": {"40x96": "cuBLAS"}}, "expected \"cublas\""),
    ([], "top level must be an object"),
])
def test_bad_gemv_table_is_one_clear_error(tmp_path, monkeypatch, table, problem):
    pytest.importorskip("triton")
    import json

    from vidspec.decoding.fast import gemv

    path = tmp_path / "bad.json"
    path.write_text(json.dumps(table))
    monkeypatch.setenv(gemv.TABLE_ENV, str(path))
    with pytest.raises(gemv.GemvTableError, match=problem) as info:
        gemv.gemv_config(1, 40, 96)
    assert str(path) in str(info.value)
    path.write_text("{not json")
    with pytest.raises(gemv.GemvTableError, match="not valid JSON"):
        gemv.load_table(path)
    with pytest.raises(gemv.GemvTableError, match="cannot read"):
        gemv.load_table(tmp_path / "missing.json")


def test_gemv_option_values(tiny):
    """gemv takes False, True or "all"; anything else is refused by name before any device check."""
    target = fresh("tiny-qwen2.5-vl")
    with pytest.raises(ValueError, match="gemv must be False, True or 'all'"):
        FastLM(target.model.model.language_model, target.model.lm_head, max_len=64, gemv="verify")
