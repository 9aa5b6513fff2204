"""A static-cache forward of a Qwen2-architecture language model that reads the HF module's weights.

Both families' language models are Qwen2 decoders (Qwen2.5-VL's text model differs only in its
3-axis M-RoPE): RMSNorm, GQA attention with q/k/v biases, SwiGLU MLP. :class:`FastLM` runs that
decoder as plain functions over the parameters of ``model.model.language_model`` (no copies are
made), with

- a preallocated KV cache ``(layers, 2, max_len, kv_heads, head_dim)`` whose rollback is an O(1)
  change of a length counter (:class:`StaticKVCache`);
- one forward for every kind of step (prefill chunk, AR step, K-token verify, tree block): the new
  tokens go to consecutive cache slots and attend to the prefix before a *region start* ``base``
  plus the region slots that a boolean ``tree_mask`` allows (a chain is a lower-triangular mask);
- on CUDA, each step length ``T`` and cache *bucket* (the attended length rounded up to
  ``bucket`` slots, so attention reads only the valid cache plus < ``bucket`` slots) is captured
  once as a ``torch.cuda.CUDAGraph`` and replayed; all inputs of a replay travel in one pinned
  host buffer and one host-to-device copy.

Why manual graphs and not ``torch.compile(mode="reduce-overhead")``: the KV cache is mutated in
place at positions given by device tensors and the graph must be chosen by the (host-known) cache
bucket; Inductor's cudagraph trees skip graphs with mutated inputs and would recompile per bucket.
Capturing ourselves keeps the static buffers, the memory pool and the choice of graph explicit. The
elementwise work (RMSNorm, RoPE, SiLU-mul) can still be fused by ``torch.compile`` of the two
per-layer pieces that do not touch the cache (``compile=True``): their shapes depend only on
``T``, so one compilation serves every layer and every bucket, and the compiled kernels are then
captured inside our graphs.

Numerics follow HF exactly in eager mode (RMSNorm in float32 then cast, RoPE tables cast to the
model dtype, residuals in the model dtype), so fp32 CPU runs match HF to float rounding.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from vidspec.decoding.verifiers.lvspec import loose_accept

log = logging.getLogger(__name__)


# ---- numerics shared with HF ------------------------------------------------------------------
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF Qwen2 RMSNorm: normalise in float32, cast back, then scale (in that order, for parity)."""
    dtype = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_tables(pos3: torch.Tensor, inv_freq: torch.Tensor, scaling: float, sections: tuple[int, ...] | None,
                dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables for (M-)RoPE.

    Args:
        pos3: ``(3, T) int64`` temporal/height/width positions (the three rows are equal for text
            tokens, and for 1-D RoPE models only row 0 is read).
        inv_freq: ``(head_dim/2,) float32`` the HF rotary module's inverse frequencies.
        scaling: the HF rotary module's ``attention_scaling``.
        sections: Qwen2.5-VL's ``mrope_section`` (sizes of the t/h/w bands of the rotary half), or
            None for 1-D RoPE.
        dtype: the model dtype (HF casts the tables to it before applying them).

    Returns:
        cos, sin: ``(T, head_dim)`` in ``dtype``.
    """
    freqs = pos3[..., None].float() * inv_freq.float()  # (3, T, D/2)
    if sections:
        f = torch.cat([band[i % 3] for i, band in enumerate(freqs.split(list(sections), dim=-1))], dim=-1)
    else:
        f = freqs[0]
    emb = torch.cat((f, f), dim=-1)
    return (emb.cos() * scaling).to(dtype), (emb.sin() * scaling).to(dtype)


# ---- weights -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class LayerWeights:
    """References (not copies) to one HF decoder layer's parameters.

    ``wqkv``/``bqkv``/``wgu`` are set when the layer's q/k/v and gate/up weights live in one
    buffer (:func:`fuse_layer_weights`); ``wq``... are then views of it.
    """

    in_norm: torch.Tensor
    in_eps: float
    wq: torch.Tensor
    bq: torch.Tensor | None
    wk: torch.Tensor
    bk: torch.Tensor | None
    wv: torch.Tensor
    bv: torch.Tensor | None
    wo: torch.Tensor
    bo: torch.Tensor | None
    post_norm: torch.Tensor
    post_eps: float
    wg: torch.Tensor
    wu: torch.Tensor
    wd: torch.Tensor
    wqkv: torch.Tensor | None = None
    bqkv: torch.Tensor | None = None
    wgu: torch.Tensor | None = None


def _eps(norm) -> float:
    return float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))


def _check_act(layer) -> None:
    act = getattr(getattr(layer.mlp, "config", None), "hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise NotImplementedError(f"fast path supports SiLU MLPs, got {act!r}")


def layer_weights(layer) -> LayerWeights:
    """Read the parameters of a Qwen2-style HF decoder layer (shared storage, no copies)."""
    a, m = layer.self_attn, layer.mlp
    _check_act(layer)
    return LayerWeights(
        in_norm=layer.input_layernorm.weight, in_eps=_eps(layer.input_layernorm),
        wq=a.q_proj.weight, bq=a.q_proj.bias, wk=a.k_proj.weight, bk=a.k_proj.bias,
        wv=a.v_proj.weight, bv=a.v_proj.bias, wo=a.o_proj.weight, bo=a.o_proj.bias,
        post_norm=layer.post_attention_layernorm.weight, post_eps=_eps(layer.post_attention_layernorm),
        wg=m.gate_proj.weight, wu=m.up_proj.weight, wd=m.down_proj.weight,
        wqkv=getattr(a, "_vidspec_wqkv", None), bqkv=getattr(a, "_vidspec_bqkv", None),
        wgu=getattr(m, "_vidspec_wgu", None),
    )


def _concat_params(params: list[torch.nn.Parameter]) -> torch.Tensor:
    """One buffer holding ``params`` back to back (dim 0); each parameter becomes a view of it.

    The Parameter objects are kept (``.data`` is re-pointed), so the module, its state_dict keys
    and any optimiser references stay valid; the old storages are freed once nothing else holds
    them, so no second copy of the weights exists.
    """
    rows = [p.shape[0] for p in params]
    buf = torch.empty((sum(rows), *params[0].shape[1:]), dtype=params[0].dtype, device=params[0].device)
    with torch.no_grad():
        o = 0
        for p, r in zip(params, rows):
            buf[o:o + r].copy_(p)
            p.data = buf[o:o + r]
            o += r
    return buf


def fuse_layer_weights(layer) -> None:
    """Put a Qwen2 layer's q/k/v weights (and biases) and gate/up weights into single buffers, in place.

    The HF modules keep computing the same function (their parameters become views of the fused
    buffers); the fused buffers are remembered on the modules (``_vidspec_wqkv``, ``_vidspec_bqkv``,
    ``_vidspec_wgu``), so fusing twice is a no-op. Lets the fast path run one GEMM for q/k/v and one
    for gate/up.
    """
    a, m = layer.self_attn, layer.mlp
    _check_act(layer)
    if getattr(a, "_vidspec_wqkv", None) is None:
        biases = [a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]
        a._vidspec_wqkv = _concat_params([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])
        a._vidspec_bqkv = _concat_params(biases) if all(b is not None for b in biases) else None
        if a._vidspec_bqkv is None and any(b is not None for b in biases):
            raise NotImplementedError("q/k/v projections with biases on only some of them")
    if getattr(m, "_vidspec_wgu", None) is None:
        m._vidspec_wgu = _concat_params([m.gate_proj.weight, m.up_proj.weight])


# ---- the per-layer pieces that do not touch the cache (compilable, shapes depend on T) ----------
# The residual add of a layer's MLP output is deferred to the next piece (``delta``), so a fused
# compile does it in the same kernel as the next RMSNorm.
def _lin(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, small: bool) -> torch.Tensor:
    """``F.linear``, or with ``small`` the Triton small-M product (:mod:`vidspec.decoding.fast.gemv`, registered as
    ``torch.ops.vidspec.small_linear`` once that module is imported; FastLM imports it for ``gemv``)."""
    if small:
        return torch.ops.vidspec.small_linear(x, w, b)
    return F.linear(x, w, b)


def _pre_fused(x: torch.Tensor, delta: torch.Tensor | None, in_norm: torch.Tensor, eps: float, wqkv: torch.Tensor,
               bqkv: torch.Tensor | None, small: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add, RMSNorm and the fused q/k/v projection: ``(T, d) -> (T, d), (T, (hq + 2 hkv) hd)``."""
    if delta is not None:
        x = x + delta
    return x, _lin(rms_norm(x, in_norm, eps), wqkv, bqkv, small)


def _pre_split(x: torch.Tensor, delta: torch.Tensor | None, in_norm: torch.Tensor, eps: float, wq, bq, wk, bk, wv,
               bv) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_pre_fused` with three projections (weights not fused)."""
    if delta is not None:
        x = x + delta
    h = rms_norm(x, in_norm, eps)
    return x, torch.cat([F.linear(h, wq, bq), F.linear(h, wk, bk), F.linear(h, wv, bv)], dim=-1)


def _post_fused(x: torch.Tensor, attn: torch.Tensor, wo, bo, post_norm, eps: float, wgu,
                wd, small: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Output projection, residual, RMSNorm, SwiGLU MLP with fused gate/up: returns ``x`` and the MLP output."""
    x = x + _lin(attn, wo, bo, small)
    gu = _lin(rms_norm(x, post_norm, eps), wgu, None, small)
    g, u = gu.chunk(2, dim=-1)
    return x, _lin(F.silu(g) * u, wd, None, small)


def _post_split(x: torch.Tensor, attn: torch.Tensor, wo, bo, post_norm, eps: float, wg, wu,
                wd) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_post_fused` with separate gate and up projections."""
    x = x + F.linear(attn, wo, bo)
    h = rms_norm(x, post_norm, eps)
    return x, F.linear(F.silu(F.linear(h, wg)) * F.linear(h, wu), wd)


def argmax_rows(logits: torch.Tensor, groups: int = 64) -> torch.Tensor:
    """``logits.argmax(-1)`` in two stages (max per vocabulary chunk, then over chunks).

    Same index as ``argmax`` (first maximum: the first chunk holding the maximum, then its first
    position), but a compiled kernel gets ``T * groups`` programs instead of one per row.
    """
    v = logits.shape[-1]
    if v % groups:
        return logits.argmax(-1)
    mx, ix = logits.view(*logits.shape[:-1], groups, v // groups).max(-1)
    j = mx.argmax(-1, keepdim=True)
    return (ix.gather(-1, j) + j * (v // groups)).squeeze(-1)


def _final(x: torch.Tensor, delta: torch.Tensor, norm: torch.Tensor, eps: float, head: torch.Tensor,
           head_bias: torch.Tensor | None, ids: torch.Tensor, head_ids: torch.Tensor | None, small: bool = False):
    """Last residual add, final norm, LM head, greedy tokens and device-side chain acceptance.

    Returns ``(x, h, logits float32, argmax in target ids, accept)``; ``accept`` is
    ``[n_accepted, next_token]`` of strict greedy verification of the chain ``ids``.
    """
    x = x + delta
    h = rms_norm(x, norm, eps)
    logits = _lin(h, head, head_bias, small).float()
    am = argmax_rows(logits)
    if head_ids is not None:
        am = head_ids[am]
    match = (am[:-1] == ids[1:]).long()
    n = match.cumprod(0).sum()
    accept = torch.stack([n, am.gather(0, n.view(1))[0]])
    return x, h, logits, am, accept


def _rope_torch(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, hq: int, hkv: int, hd: int):
    """Split the fused projection and apply RoPE (HF order of operations): q, k, v."""
    t = qkv.shape[0]
    q, k, v = qkv.split([hq * hd, hkv * hd, hkv * hd], dim=-1)
    q, k, v = q.reshape(t, hq, hd), k.reshape(t, hkv, hd), v.reshape(t, hkv, hd)
    c, s = cos[:, None, :], sin[:, None, :]
    return q * c + rotate_half(q) * s, k * c + rotate_half(k) * s, v


# ---- attention ---------------------------------------------------------------------------------
def step_mask(t: int, lb: int, base: torch.Tensor, tree_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive attention mask of a decode/verify/tree step over the first ``lb`` cache slots.

    A query sees every slot before ``base`` and, inside the region ``[base, base + R)``, the
    slots its row of ``tree_mask`` allows. Slots after the region are never seen, so stale or
    not-yet-written cache entries cost nothing but the read.

    Args:
        t: query tokens.
        lb: attended cache length (a bucket on CUDA, exact on CPU).
        base: ``() int64`` region start (device scalar; read inside CUDA graphs).
        tree_mask: ``(T, R) bool``; row i = region slots token i may attend to (itself included).
        dtype: mask dtype (the model dtype).

    Returns:
        ``(T, lb)`` with 0 where visible and -inf elsewhere.
    """
    r = tree_mask.shape[1]
    rel = torch.arange(lb, device=tree_mask.device) - base
    in_region = (rel >= 0) & (rel < r)
    allowed = tree_mask[:, rel.clamp(0, r - 1)] & in_region[None, :]
    visible = (rel < 0)[None, :] | allowed
    zero = torch.zeros((), dtype=dtype, device=tree_mask.device)
    return torch.where(visible, zero, torch.full((), float("-inf"), dtype=dtype, device=tree_mask.device))


def attend_step(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, mask_rep: torch.Tensor,
                scale: float) -> torch.Tensor:
    """GQA attention of a few query tokens over a cache view, one SDPA call, no KV copy.

    The query heads that share a KV head are stacked along the query axis, so the kernel reads each
    KV head once and no backend needs GQA support.

    Args:
        q: ``(T, hq, hd)``.
        k_cache, v_cache: ``(L, hkv, hd)`` views of the cache (rows strided by ``hkv * hd``).
        mask_rep: ``(n_rep * T, L)`` additive mask (the step mask repeated per grouped head).

    Returns:
        ``(T, hq * hd)``.
    """
    t, hq, hd = q.shape
    hkv = k_cache.shape[1]
    rep = hq // hkv
    qg = q.view(t, hkv, rep, hd).permute(1, 2, 0, 3).reshape(1, hkv, rep * t, hd)
    k = k_cache.permute(1, 0, 2)[None]
    v = v_cache.permute(1, 0, 2)[None]
    o = F.scaled_dot_product_attention(qg, k, v, attn_mask=mask_rep[None, None], scale=scale)
    return o.view(hkv, rep, t, hd).permute(2, 0, 1, 3).reshape(t, hq * hd)


def _lower_right_causal(t: int, lb: int):
    """A lower-right causal bias object when torch has one (lets SDPA pick flash/efficient kernels)."""
    try:
        from torch.nn.attention.bias import causal_lower_right
    except ImportError:  # pragma: no cover - old torch
        return None
    return causal_lower_right(t, lb)


def attend_prefill(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, scale: float) -> torch.Tensor:
    """Causal attention of a prefill chunk (the last ``T`` of ``L`` cached positions) over the cache.

    KV heads are repeated to the query heads (a transient copy of this chunk's view) rather than
    passing ``enable_gqa``: that keeps flash / memory-efficient kernels eligible on every torch
    version, where an unsupported GQA flag would silently fall back to the O(T*L) math kernel.

    Args:
        q: ``(T, hq, hd)``.
        k_cache, v_cache: ``(L, hkv, hd)`` with ``L >= T``; the chunk's own keys are the last T rows.

    Returns:
        ``(T, hq * hd)``.
    """
    t, hq, hd = q.shape
    lb, hkv, _ = k_cache.shape
    rep = hq // hkv
    qh = q.permute(1, 0, 2)[None]
    k = k_cache.permute(1, 0, 2)
    v = v_cache.permute(1, 0, 2)
    if rep > 1:
        k = k.repeat_interleave(rep, dim=0)
        v = v.repeat_interleave(rep, dim=0)
    k, v = k[None], v[None]
    if lb == t:
        o = F.scaled_dot_product_attention(qh, k, v, is_causal=True, scale=scale)
    else:
        bias = _lower_right_causal(t, lb)
        o = None
        if bias is not None:
            try:
                o = F.scaled_dot_product_attention(qh, k, v, attn_mask=bias, scale=scale)
            except (RuntimeError, TypeError, NotImplementedError):  # pragma: no cover - backend without it
                o = None
        if o is None:
            keep = torch.arange(lb, device=q.device)[None, :] <= (lb - t + torch.arange(t, device=q.device))[:, None]
            o = F.scaled_dot_product_attention(qh, k, v, attn_mask=keep[None, None], scale=scale)
    return o[0].permute(1, 0, 2).reshape(t, hq * hd)


# ---- cache -------------------------------------------------------------------------------------
class StaticKVCache:
    """A preallocated KV cache with a length counter.

    ``kv`` is ``(layers, 2, max_len, kv_heads, head_dim)`` in the model dtype. Positions
    ``[0, length)`` are valid; rollback only lowers ``length`` (O(1)): stale entries beyond it are
    masked out and later overwritten. It answers ``get_seq_length()`` and ``crop()`` like an HF
    cache (both the "keep n" and the newer "remove -n" conventions), so code written for HF caches
    (``crop_cache``, ``ModelDrafter.commit``) works on it unchanged.

    ``tree`` holds the open tree session (see :class:`TreeSession`), if any.
    """

    def __init__(self, kv: torch.Tensor, serial: int):
        self.kv = kv
        self.length = 0
        self.serial = serial
        self.tree: TreeSession | None = None

    @property
    def max_len(self) -> int:
        return self.kv.shape[2]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def crop(self, n: int) -> None:
        self.length = max(0, self.length + n) if n < 0 else min(self.length, n)
        self.tree = None


@dataclass
class TreeSession:
    """Tree nodes appended to a cache since ``base`` (the committed length when the tree began).

    Attributes:
        base: first region slot; node ``g`` of the session lives at slot ``base + g``.
        parents: per node, the session index of its parent (-1: attached to the committed prefix).
        depths: per node, its depth (session roots have depth 0).
        ancestors: per node, the session indices it may attend to (ancestors and itself).
    """

    base: int
    parents: list[int]
    depths: list[int]
    ancestors: list[list[int]]

    def add(self, parent: int) -> tuple[int, int]:
        """Append a node under ``parent`` (a session index, or -1): its session index and depth."""
        g = len(self.parents)
        if not -1 <= parent < g:
            raise ValueError(f"node {g}: parent {parent} must be -1 or an earlier node")
        d = 0 if parent < 0 else self.depths[parent] + 1
        self.parents.append(parent)
        self.depths.append(d)
        self.ancestors.append(([] if parent < 0 else self.ancestors[parent]) + [g])
        return g, d


# ---- the model ---------------------------------------------------------------------------------
@dataclass
class StepOutput:
    """Views into :class:`FastLM`'s output buffers after one step (valid until the next step).

    Attributes:
        logits: ``(T, V) float32`` (prefill: only the last row, ``(1, V)``).
        argmax: ``(T,) int64`` greedy token per row.
        accept: ``(2,) int64`` chain greedy acceptance ``[n_accepted, next_token]`` computed on the
            device from the step's own input tokens (meaningful for chain verify steps).
        hidden: name -> ``(T, d)`` hidden states requested at construction ("last" is after the
            final norm, as HF's ``last_hidden_state``).
        loose: ``(T+1,) int64`` the chain's greedy loose acceptance ``[n, next, kinds...]`` of the step's
            loose rule (:meth:`FastLM.set_loose`, :func:`~vidspec.decoding.verifiers.lvspec.loose_accept`);
            None for steps run without one.
    """

    logits: torch.Tensor
    argmax: torch.Tensor
    accept: torch.Tensor
    hidden: dict[str, torch.Tensor]
    loose: torch.Tensor | None = None


class _Graph:
    """One captured step: its CUDA graph and the output buffers it writes."""

    def __init__(self, graph, out: StepOutput):
        self.graph = graph
        self.out = out


class FastLM:
    """Static-cache, CUDA-graph forward of an HF Qwen2 / Qwen2.5-VL text model and its LM head.

    Args:
        language_model: ``model.model.language_model`` (a ``Qwen2Model`` or ``Qwen2_5_VLTextModel``).
        lm_head: the ``nn.Linear`` LM head.
        max_len: cache capacity in positions (prompt + generated + one tree/verify block).
        hidden_layers: name -> HF hidden-state index to expose per step (index 0 is the
            embeddings, i the output of layer i, ``num_layers`` the final *normed* state as HF's
            ``hidden_states[-1]``).
        graphs: capture steps as CUDA graphs (ignored off CUDA).
        compile: fuse the per-layer elementwise work with ``torch.compile`` (CUDA only; default:
            on when Triton is importable).
        bucket: attended cache lengths are rounded up to a multiple of this in graph mode.
        max_tree: region width of tree/verify masks in graph mode (largest T of a step and largest
            tree session).
        max_step: largest T that is captured as a graph; longer steps run eagerly.
        fuse: put each layer's q/k/v and gate/up weights into one buffer (in place: the HF modules'
            parameters become views of it, see :func:`fuse_layer_weights`), so a step runs one GEMM
            for each (default: on CUDA).
        kernels: run decode/verify/tree steps with the Triton kernels of
            :mod:`vidspec.decoding.fast.kernels` (RoPE + KV write in one launch, split-K attention
            over exactly the valid cache, so one graph per step length serves every context; default:
            on CUDA when Triton is importable). Off: SDPA over a bucketed cache with an additive mask.
        compile_mode: ``torch.compile`` mode of the fused pieces (None: the default mode).
        head_ids: ``(V',) int64`` target token id of each row of ``lm_head`` when the head covers
            only a subset of the vocabulary (an EAGLE-3-style reduced draft head): step outputs'
            ``argmax``/``accept`` are then target ids, ``logits`` are over the V' rows. Input ids
            and embeddings stay in the full vocabulary.
        gemv: run the weight products of single-token steps (AR decode, draft-model steps) with the
            Triton GEMV of :mod:`vidspec.decoding.fast.gemv` instead of cuBLAS (CUDA, bf16/fp16, fused
            weights). Measured on an H200 at 7B shapes only (the AR step 4.19 vs 4.76 ms at 2k context,
            docs/results.md), so off by default. With ``True`` verify steps and prefill chunks keep cuBLAS;
            ``"all"`` routes every step of up to 16 tokens (verify steps of K <= 15 drafts too: the split-K
            kernels).
            Either way each product's kernel, or cuBLAS, is what ``gemv.gemv_config`` picks for its
            shape (the ``VIDSPEC_GEMV_TABLE`` table when set, checked here at construction).
    """

    def __init__(self, language_model, lm_head, *, max_len: int, hidden_layers: dict[str, int] | None = None,
                 graphs: bool = True, compile: bool | None = None, bucket: int = 256, max_tree: int = 64,
                 max_step: int = 64, fuse: bool | None = None, kernels: bool | None = None,
                 compile_mode: str | None = None, head_ids: torch.Tensor | None = None,
                 gemv: bool | str = False):
        self.lm = language_model
        self.lm_head = lm_head
        cfg = language_model.config
        layer_types = getattr(cfg, "layer_types", None) or []
        if any(t != "full_attention" for t in layer_types):
            raise NotImplementedError("fast path supports full attention only (no sliding-window layers)")
        rot = language_model.rotary_emb
        if getattr(rot, "rope_type", "default") == "dynamic":
            raise NotImplementedError("dynamic RoPE scaling is not supported by the fast path")
        self.inv_freq = rot.inv_freq
        self.rope_scaling = float(getattr(rot, "attention_scaling", 1.0))
        sections = getattr(rot, "mrope_section", None)
        self.sections: tuple[int, ...] | None = tuple(sections) if sections else None
        attn0 = language_model.layers[0].self_attn
        self.num_layers = len(language_model.layers)
        self.hq = cfg.num_attention_heads
        self.hkv = cfg.num_key_value_heads
        self.hd = attn0.head_dim
        self.scale = float(getattr(attn0, "scaling", self.hd ** -0.5))
        self.d = cfg.hidden_size
        self.embed = language_model.embed_tokens.weight
        self.device = self.embed.device
        self.dtype = self.embed.dtype
        on_cuda = self.device.type == "cuda"
        self.fused = bool(on_cuda if fuse is None else fuse)
        if self.fused:
            for layer in language_model.layers:
                fuse_layer_weights(layer)
        self.layers = [layer_weights(layer) for layer in language_model.layers]
        if self.fused and any(lw.wqkv is None or lw.wgu is None for lw in self.layers):
            raise RuntimeError("weight fusion failed")  # pragma: no cover
        self.norm = language_model.norm.weight
        self.norm_eps = _eps(language_model.norm)
        self.head = lm_head.weight
        self.head_bias = lm_head.bias
        self.vocab = self.head.shape[0]
        self.head_ids = None
        if head_ids is not None:
            self.head_ids = torch.as_tensor(head_ids, dtype=torch.long).to(self.device)
            if self.head_ids.shape != (self.vocab,):
                raise ValueError(f"head_ids has shape {tuple(self.head_ids.shape)}, the head has {self.vocab} rows")
        self.hidden_layers = dict(hidden_layers or {})
        for name, idx in self.hidden_layers.items():
            if not 0 <= idx <= self.num_layers:
                raise ValueError(f"hidden layer {name}={idx} outside 0..{self.num_layers}")
        self.graphs = bool(graphs and on_cuda)
        if compile is None:
            compile = on_cuda and _has_triton()
        self.compiled = bool(compile and on_cuda)
        fits = kernels_fit(self.hd)
        self.kernels = bool((on_cuda and _has_triton() and fits) if kernels is None else kernels)
        if self.kernels and not _has_triton():
            raise RuntimeError("kernels=True needs Triton")
        if self.kernels and not fits:
            raise ValueError(f"kernels=True needs a power-of-two head dim >= 16, this model's is {self.hd}")
        if gemv not in (False, True, "all"):
            raise ValueError(f"gemv must be False, True or 'all', got {gemv!r}")
        #: the most tokens a step may have for its weight products to take the Triton path (0: never)
        self.gemv_rows = 0
        if gemv:
            if not (self.fused and on_cuda and _has_triton() and self.dtype in (torch.bfloat16, torch.float16)):
                raise ValueError("gemv=True needs CUDA, Triton, fused weights and a bf16/fp16 model")
            from vidspec.decoding.fast import gemv as _gemv  # (registers vidspec::small_linear)

            _gemv.active_table()  # a bad VIDSPEC_GEMV_TABLE fails here, not inside a compile trace
            self.gemv_rows = _gemv.MAX_ROWS if gemv == "all" else 1
        self.compile_mode = compile_mode
        self.bucket = bucket
        self.max_tree = max_tree
        self.max_step = min(max_step, max_tree)
        self._pre: Callable = _pre_fused if self.fused else _pre_split
        self._post: Callable = _post_fused if self.fused else _post_split
        self._final: Callable = _final
        self._pre_c, self._post_c, self._final_c = self._pre, self._post, self._final
        if self.compiled:
            self._enable_compile()
        self.max_len = max_len
        self.kv = torch.zeros(self.num_layers, 2, max_len, self.hkv, self.hd, dtype=self.dtype, device=self.device)
        self._serial = 0
        self.cache: StaticKVCache | None = None
        # Per-T input arenas: [start, base, offset, depth(T), ids(T)] int64 and the (T, max_tree) mask.
        self._arena: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._host: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        #: (T, lb, loose rule key or None) -> captured step
        self._graphs: dict[tuple[int, int, int | None], _Graph] = {}
        #: loose rule key -> (protected mask on the device, eps, shift, window); see set_loose
        self._loose: dict[int, tuple[torch.Tensor, float | None, bool, int]] = {}
        self._loose_fn: Callable = loose_accept
        self._h2d_done: dict[int, torch.cuda.Event] = {}
        #: T -> (host tree mask, its version) last copied into the T mask buffer (which still holds it)
        self._mask_src: dict[int, tuple[torch.Tensor, int]] = {}
        self._pool = None

    # ---- setup helpers --------------------------------------------------------------------------
    def _enable_compile(self) -> None:
        from vidspec.decoding.fast.compile_cache import use_compile_cache

        use_compile_cache()  # compiled kernels on disk under a user cache folder: a second process loads them
        raise_recompile_limit()
        kw = dict(fullgraph=True, dynamic=False)
        if self.compile_mode:
            kw["mode"] = self.compile_mode
        self._pre_c = torch.compile(self._pre, **kw)
        self._post_c = torch.compile(self._post, **kw)
        self._final_c = torch.compile(self._final, **kw)
        self._loose_fn = torch.compile(loose_accept, **kw)

    def new_cache(self) -> StaticKVCache:
        """Start a new request: the cache is reset (one live request per FastLM)."""
        self._serial += 1
        self.cache = StaticKVCache(self.kv, self._serial)
        return self.cache

    def set_loose(self, key: int, protected_ids: frozenset[int], eps: float | None, shift: bool, window: int) -> None:
        """Register loose rule ``key``: a chain step run with ``loose=key`` also computes its greedy loose
        acceptance (:attr:`StepOutput.loose`) inside the step (and its CUDA graph, captured per rule)."""
        if key in self._loose:
            return
        size = max(self.embed.shape[0], self.vocab, max(protected_ids, default=-1) + 1)
        mask = torch.zeros(size, dtype=torch.bool, device=self.device)
        if protected_ids:
            mask[torch.tensor(sorted(protected_ids), dtype=torch.long, device=self.device)] = True
        self._loose[key] = (mask, eps, bool(shift), int(window))

    def weight_bytes(self) -> int:
        """Bytes of parameters one decode step must read (layers, final norm, LM head)."""
        n = sum(t.numel() * t.element_size() for lw in self.layers for t in
                (lw.in_norm, lw.wq, lw.bq, lw.wk, lw.bk, lw.wv, lw.bv, lw.wo, lw.bo, lw.post_norm, lw.wg, lw.wu, lw.wd)
                if t is not None)
        return n + self.norm.numel() * self.norm.element_size() + self.head.numel() * self.head.element_size()

    # ---- the forward ----------------------------------------------------------------------------
    def _layers(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, ids: torch.Tensor | None, *, lb: int,
                slots: torch.Tensor | None = None, mask_rep: torch.Tensor | None = None,
                arena: torch.Tensor | None = None, tree_mask: torch.Tensor | None = None, want: dict[int, str],
                compiled: bool = False, logits: bool = True):
        """Run all decoder layers on ``x`` ``(T, d)`` and the LM head.

        Three attention modes: ``arena`` given — a step through the Triton kernels (K/V written at
        ``arena[0] + t``, visibility from ``arena[1]`` and ``tree_mask``); ``mask_rep`` given — a
        step through SDPA over ``lb`` slots with an additive mask (K/V written at ``slots``);
        neither — a causal prefill chunk occupying the last T of ``lb`` slots.

        Returns ``(x, h, logits, argmax, accept, hidden)`` (the last four None/empty without
        ``logits``), ``h`` being the final-normed state.
        """
        pre, post, final = (self._pre_c, self._post_c, self._final_c) if compiled else (
            self._pre, self._post, self._final)
        # Single-token steps (never a prefill chunk) take the Triton GEMV: it beat cuBLAS in the AR step
        # at 7B shapes (4.34 vs 4.80 ms), while its 2-16-row kernel lost in the K=8 verify step (5.42 vs 4.98 ms)
        # before split-K; gemv="all" lets steps of up to 16 tokens through as well.
        small = (arena is not None or mask_rep is not None) and x.shape[0] <= self.gemv_rows
        hidden: dict[str, torch.Tensor] = {}
        delta = None
        for i, lw in enumerate(self.layers):
            if self.fused:
                x, qkv = pre(x, delta, lw.in_norm, lw.in_eps, lw.wqkv, lw.bqkv, small)
            else:
                x, qkv = pre(x, delta, lw.in_norm, lw.in_eps, lw.wq, lw.bq, lw.wk, lw.bk, lw.wv, lw.bv)
            if i in want:
                hidden[want[i]] = x  # the output of layer i - 1 (index 0: the embeddings)
            kc, vc = self.kv[i, 0], self.kv[i, 1]
            if arena is not None:
                from vidspec.decoding.fast import kernels

                q = kernels.rope_kv_write(qkv, cos, sin, kc, vc, arena, self.hq, self.hkv, self.hd)
                a = kernels.decode_attention(q, kc, vc, tree_mask, arena, self.scale)
            else:
                q, k, v = _rope_torch(qkv, cos, sin, self.hq, self.hkv, self.hd)
                kc.index_copy_(0, slots, k)
                vc.index_copy_(0, slots, v)
                if mask_rep is None:
                    a = attend_prefill(q, kc[:lb], vc[:lb], self.scale)
                else:
                    a = attend_step(q, kc[:lb], vc[:lb], mask_rep, self.scale)
            if self.fused:
                x, delta = post(x, a, lw.wo, lw.bo, lw.post_norm, lw.post_eps, lw.wgu, lw.wd, small)
            else:
                x, delta = post(x, a, lw.wo, lw.bo, lw.post_norm, lw.post_eps, lw.wg, lw.wu, lw.wd)
        if not logits:
            x = x + delta
            h = rms_norm(x, self.norm, self.norm_eps)
            if self.num_layers in want:
                hidden[want[self.num_layers]] = h
            return x, h, None, None, None, hidden
        x, h, lg, am, accept = final(x, delta, self.norm, self.norm_eps, self.head, self.head_bias, ids,
                                     self.head_ids, small)
        if self.num_layers in want:
            hidden[want[self.num_layers]] = h
        return x, h, lg, am, accept, hidden

    def _want(self) -> dict[int, str]:
        # Several names may share one layer index; keep the first and alias the rest afterwards.
        want: dict[int, str] = {}
        for name, idx in self.hidden_layers.items():
            want.setdefault(idx, name)
        return want

    def _alias(self, hidden: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        want = self._want()
        return {name: hidden[want[idx]] for name, idx in self.hidden_layers.items()}

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(h, self.head, self.head_bias).float()

    @torch.inference_mode()
    def prefill_chunk(self, embeds: torch.Tensor, pos3: torch.Tensor, start: int, want_hidden: bool,
                      last_logits: bool) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
        """Append a chunk of the prompt to the cache (eager, causal, fused SDPA).

        Args:
            embeds: ``(T, d)`` input embeddings of prompt positions ``[start, start + T)``.
            pos3: ``(3, T) int64`` their RoPE positions.
            start: cache slot of the chunk's first token (the cache holds ``start`` positions).
            want_hidden: return the configured hidden states of the chunk.
            last_logits: return the ``(V,) float32`` logits of the chunk's last token (over the
                head's rows: with ``head_ids``, a reduced vocabulary).

        Returns:
            logits (or None) and hidden states by name (``(T, d)``).
        """
        cache = self.cache
        assert cache is not None, "new_cache() first"
        t = embeds.shape[0]
        if start + t > self.max_len:
            raise ValueError(f"prompt of {start + t} positions exceeds the cache ({self.max_len}); raise max_len")
        cos, sin = rope_tables(pos3, self.inv_freq, self.rope_scaling, self.sections, self.dtype)
        slots = torch.arange(start, start + t, device=self.device)
        want = self._want() if want_hidden else {}
        _, h, _, _, _, hidden = self._layers(embeds.to(self.dtype), cos, sin, None, lb=start + t, slots=slots,
                                             want=want, logits=False)
        cache.length = start + t
        cache.tree = None
        logits = self._logits(h[-1:])[0] if last_logits else None
        return logits, (self._alias(hidden) if want_hidden else {})

    def _step_body(self, t: int, lb: int, arena: torch.Tensor, mask: torch.Tensor, compiled: bool,
                   loose: int | None = None) -> StepOutput:
        """The step computation on device tensors only (what a CUDA graph captures); with ``loose``, a
        registered rule's chain acceptance too."""
        start, base, offset = arena[0], arena[1], arena[2]
        depth = arena[3:3 + t]
        ids = arena[3 + t:3 + 2 * t]
        pos = (base + offset + depth)[None, :].expand(3, t)
        cos, sin = rope_tables(pos, self.inv_freq, self.rope_scaling, self.sections, self.dtype)
        x = F.embedding(ids, self.embed)
        if self.kernels:
            out = self._layers(x, cos, sin, ids, lb=lb, arena=arena, tree_mask=mask, want=self._want(),
                               compiled=compiled)
        else:
            slots = start + torch.arange(t, device=self.device)
            m = step_mask(t, lb, base, mask, self.dtype)
            rep = self.hq // self.hkv
            mask_rep = m[None].expand(rep, t, lb).reshape(rep * t, lb)
            out = self._layers(x, cos, sin, ids, lb=lb, slots=slots, mask_rep=mask_rep, want=self._want(),
                               compiled=compiled)
        _, _, logits, am, accept, hidden = out
        decided = None
        if loose is not None:
            prot, eps, shift, window = self._loose[loose]
            fn = self._loose_fn if compiled else loose_accept
            decided = fn(logits, am, ids, prot, eps, shift, window)
        return StepOutput(logits, am, accept, self._alias(hidden), decided)

    def _arena_for(self, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        if t not in self._arena:
            self._arena[t] = (torch.zeros(3 + 2 * t, dtype=torch.long, device=self.device),
                              torch.zeros(t, self.max_tree, dtype=torch.bool, device=self.device))
            pin = self.device.type == "cuda"
            self._host[t] = (torch.zeros(3 + 2 * t, dtype=torch.long, pin_memory=pin),
                             torch.zeros(t, self.max_tree, dtype=torch.bool, pin_memory=pin))
        return self._arena[t]

    def _bucket(self, needed: int) -> int:
        if self.kernels:
            return self.max_len  # the kernels read the valid length from the arena: one graph per T
        lb = int(math.ceil(needed / self.bucket) * self.bucket)
        return min(lb, self.max_len)

    @torch.inference_mode()
    def step(self, tokens: list[int], start: int, base: int, offset: int, depth: list[int] | torch.Tensor,
             tree_mask: torch.Tensor, tail_ids: torch.Tensor | None = None, loose: int | None = None) -> StepOutput:
        """Run ``T`` new tokens at cache slots ``[start, start + T)``.

        Args:
            tokens: the T input token ids.
            start: slot of the first new token (everything before it is kept).
            base: region start; tokens see all slots before it, and region slots per ``tree_mask``.
            offset: RoPE position offset (Qwen2.5-VL's rope delta; 0 for 1-D RoPE).
            depth: per token, position relative to ``base`` (position = base + offset + depth); a host
                list, or a ``(T,) int64`` tensor on the model's device (copied there in stream order).
            tree_mask: ``(T, R) bool`` region visibility (R <= max_tree on the graph path); on the host,
                or on the model's device (then copied there in stream order, never read by the host).
            tail_ids: ``(m,) int64`` on the model's device: the last ``m`` input ids come from it
                (``tokens`` holds placeholders there), copied on the device in stream order, so a
                draft's output tokens feed this step without a host round trip.
            loose: a rule registered with :meth:`set_loose`: a chain step (T > 1, causal mask) also
                computes the rule's acceptance (:attr:`StepOutput.loose`); its graphs are its own.

        Returns:
            Views of the step's outputs (valid until the next step).
        """
        t = len(tokens)
        if t < 2:
            loose = None  # nothing drafted: nothing to decide
        elif loose is not None and loose not in self._loose:
            raise KeyError(f"loose rule {loose} is not registered (set_loose first)")
        end_region = base + tree_mask.shape[1]
        if start + t > self.max_len or end_region > self.max_len + self.max_tree:
            raise ValueError(f"step past the cache capacity ({self.max_len}); raise max_len")
        use_graph = self.graphs and t <= self.max_step and tree_mask.shape[1] <= self.max_tree
        m = 0 if tail_ids is None else int(tail_ids.shape[0])
        if not 0 <= m <= t:
            raise ValueError(f"{m} tail ids for a step of {t} tokens")
        depth_dev = depth if isinstance(depth, torch.Tensor) else None
        host_depth = [0] * t if depth_dev is not None else depth
        mask_on_device = tree_mask.device == self.device and self.device.type != "cpu"
        if not use_graph:
            arena = torch.tensor([start, base, offset, *host_depth, *tokens], dtype=torch.long, device=self.device)
            if m:
                arena[3 + 2 * t - m:].copy_(tail_ids)
            if depth_dev is not None:
                arena[3:3 + t].copy_(depth_dev)
            lb = start + t
            return self._step_body(t, lb, arena, tree_mask.to(self.device), compiled=False, loose=loose)
        arena, mask = self._arena_for(t)
        host, host_mask = self._host[t]
        # The previous non-blocking copy out of these pinned buffers may still be queued: wait for
        # it before overwriting them (normally long done; this only orders the host writes).
        done = self._h2d_done.get(t)
        if done is not None:
            done.synchronize()
        host.numpy()[:] = [start, base, offset, *host_depth, *tokens]  # no tensor made per step
        arena.copy_(host, non_blocking=True)
        if m:  # after the host copy on the same stream: the device ids overwrite the placeholders
            arena[3 + 2 * t - m:].copy_(tail_ids)
        if depth_dev is not None:
            arena[3:3 + t].copy_(depth_dev)
        # A chain step passes the same (cached) mask every round: copy it only when it changed.
        src = self._mask_src.get(t)
        version = None if tree_mask.is_inference() else tree_mask._version  # inference tensors have none
        if mask_on_device:
            mask.zero_()
            mask[:, : tree_mask.shape[1]].copy_(tree_mask)
            self._mask_src.pop(t, None)
        elif src is None or src[0] is not tree_mask or version is None or src[1] != version:
            host_mask.zero_()
            host_mask[:, : tree_mask.shape[1]] = tree_mask
            mask.copy_(host_mask, non_blocking=True)
            self._mask_src[t] = (tree_mask, version)
        if done is None:
            done = self._h2d_done[t] = torch.cuda.Event()
        done.record()
        return self.replay(t, self._bucket(start + t), loose)

    def replay(self, t: int, lb: int, loose: int | None = None) -> StepOutput:
        """Replay (capturing first if needed) the graph of ``T`` tokens over ``lb`` slots.

        The inputs are whatever the T-arena holds now (set by :meth:`step` or by device-side
        chaining in :meth:`FastTarget.greedy_chain_device`).
        """
        key = (t, lb, loose)
        g = self._graphs.get(key)
        if g is None:
            g = self._capture(t, lb, loose)
        else:
            g.graph.replay()
        return g.out

    def has_graph(self, t: int, lb: int, loose: int | None = None) -> bool:
        """Whether the step graph of ``t`` tokens over ``lb`` slots (with loose rule ``loose``) is captured."""
        return (t, lb, loose if t > 1 else None) in self._graphs

    def _capture(self, t: int, lb: int, loose: int | None = None) -> _Graph:
        arena, mask = self._arena_for(t)
        stream = torch.cuda.Stream(device=self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        # Warm-up runs execute the step for real (same inputs, same cache slots: idempotent) and
        # trigger compilation/autotuning outside the capture.
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._step_body(t, lb, arena, mask, self.compiled, loose)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with gc_paused(), torch.cuda.graph(graph, pool=self._pool):
            out = self._step_body(t, lb, arena, mask, self.compiled, loose)
        # Capture does not execute: replay once so the outputs (and cache writes) exist.
        graph.replay()
        g = _Graph(graph, out)
        self._graphs[(t, lb, loose)] = g
        log.debug("captured step graph T=%d over %d slots%s (%d graphs)", t, lb,
                  "" if loose is None else f" with loose rule {loose}", len(self._graphs))
        return g

    def set_chain_next(self, src_t: int, argmax: torch.Tensor) -> None:
        """Device-side chaining: make the T=1 arena the step after the last ``src_t``-token step.

        The next token is ``argmax[-1]`` (a device tensor), the next slot ``start + src_t``; no
        host synchronisation.
        """
        src, _ = self._arena_for(src_t)
        dst, dmask = self._arena_for(1)
        nxt = src[0:1] + src_t
        dst[0:1].copy_(nxt)
        dst[1:2].copy_(nxt)
        dst[2:3].copy_(src[2:3])
        dst[3:4].zero_()
        dst[4:5].copy_(argmax[-1:])
        dmask.zero_()
        dmask[0, 0] = True
        self._mask_src.pop(1, None)  # the T=1 mask was written on the device


@contextlib.contextmanager
def gc_paused():
    """Keep Python's cyclic garbage collector from running inside a CUDA graph capture.

    ``torch.cuda.graph`` collects garbage before it starts capturing, but a collection triggered by
    allocations *during* the capture can free an unreachable object that owns CUDA graphs or
    device memory (a FastTarget or drafter of an earlier request, kept alive only by a reference
    cycle), and freeing it is an illegal call while a stream is being captured
    (``cudaErrorStreamCaptureInvalidated``).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def raise_recompile_limit(limit: int = 256) -> None:
    """Let ``torch.compile`` keep one variant per step length.

    Compiled step pieces are specialised per ``T`` (and residual-delta presence); dynamo's default
    limit (8) is too small for T in 1..K+1 plus tree sizes.
    """
    import torch._dynamo as dynamo

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(dynamo.config, name):
            setattr(dynamo.config, name, max(getattr(dynamo.config, name), limit))


def kernels_fit(head_dim: int) -> bool:
    """Whether the Triton step kernels handle this head dim (``tl.arange`` needs powers of two)."""
    return head_dim >= 16 and head_dim & (head_dim - 1) == 0


def _has_triton() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True
