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

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

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
    """References (not copies) to one HF decoder layer's parameters."""

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


def _eps(norm) -> float:
    return float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))


def layer_weights(layer) -> LayerWeights:
    """Read the parameters of a Qwen2-style HF decoder layer (shared storage, no copies)."""
    a, m = layer.self_attn, layer.mlp
    act = getattr(getattr(m, "config", None), "hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise NotImplementedError(f"fast path supports SiLU MLPs, got {act!r}")
    return LayerWeights(
        in_norm=layer.input_layernorm.weight, in_eps=_eps(layer.input_layernorm),
        wq=a.q_proj.weight, bq=a.q_proj.bias, wk=a.k_proj.weight, bk=a.k_proj.bias,
        wv=a.v_proj.weight, bv=a.v_proj.bias, wo=a.o_proj.weight, bo=a.o_proj.bias,
        post_norm=layer.post_attention_layernorm.weight, post_eps=_eps(layer.post_attention_layernorm),
        wg=m.gate_proj.weight, wu=m.up_proj.weight, wd=m.down_proj.weight,
    )


# ---- the two per-layer pieces that do not touch the cache (compilable, shapes depend on T) -------
def _pre_attention(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, in_norm: torch.Tensor, wq, bq, wk, bk,
                   wv, bv, eps: float, hq: int, hkv: int, hd: int):
    """RMSNorm, q/k/v projections and RoPE.

    Args:
        x: ``(T, d)`` residual stream.
        cos, sin: ``(T, hd)`` RoPE tables.

    Returns:
        q ``(T, hq, hd)``, k ``(T, hkv, hd)``, v ``(T, hkv, hd)``.
    """
    t = x.shape[0]
    h = rms_norm(x, in_norm, eps)
    q = F.linear(h, wq, bq).view(t, hq, hd)
    k = F.linear(h, wk, bk).view(t, hkv, hd)
    v = F.linear(h, wv, bv).view(t, hkv, hd)
    c, s = cos[:, None, :], sin[:, None, :]
    q = q * c + rotate_half(q) * s
    k = k * c + rotate_half(k) * s
    return q, k, v


def _post_attention(x: torch.Tensor, attn: torch.Tensor, wo, bo, post_norm, eps: float, wg, wu, wd) -> torch.Tensor:
    """Output projection, residual, RMSNorm, SwiGLU MLP, residual. ``(T, d) -> (T, d)``."""
    x = x + F.linear(attn, wo, bo)
    h = rms_norm(x, post_norm, eps)
    return x + F.linear(F.silu(F.linear(h, wg)) * F.linear(h, wu), wd)


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
    """

    logits: torch.Tensor
    argmax: torch.Tensor
    accept: torch.Tensor
    hidden: dict[str, torch.Tensor]


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
    """

    def __init__(self, language_model, lm_head, *, max_len: int, hidden_layers: dict[str, int] | None = None,
                 graphs: bool = True, compile: bool | None = None, bucket: int = 256, max_tree: int = 64,
                 max_step: int = 64):
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
        self.layers = [layer_weights(layer) for layer in language_model.layers]
        self.embed = language_model.embed_tokens.weight
        self.norm = language_model.norm.weight
        self.norm_eps = _eps(language_model.norm)
        self.head = lm_head.weight
        self.head_bias = lm_head.bias
        self.vocab = self.head.shape[0]
        self.device = self.embed.device
        self.dtype = self.embed.dtype
        self.hidden_layers = dict(hidden_layers or {})
        for name, idx in self.hidden_layers.items():
            if not 0 <= idx <= self.num_layers:
                raise ValueError(f"hidden layer {name}={idx} outside 0..{self.num_layers}")
        on_cuda = self.device.type == "cuda"
        self.graphs = bool(graphs and on_cuda)
        if compile is None:
            compile = on_cuda and _has_triton()
        self.compiled = bool(compile and on_cuda)
        self.bucket = bucket
        self.max_tree = max_tree
        self.max_step = min(max_step, max_tree)
        self._pre: Callable = _pre_attention
        self._post: Callable = _post_attention
        if self.compiled:
            self._enable_compile()
        self.max_len = max_len
        self.kv = torch.zeros(self.num_layers, 2, max_len, self.hkv, self.hd, dtype=self.dtype, device=self.device)
        self._serial = 0
        self.cache: StaticKVCache | None = None
        # Per-T input arenas: [start, base, offset, depth(T), ids(T)] int64 and the (T, max_tree) mask.
        self._arena: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._host: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._graphs: dict[tuple[int, int], _Graph] = {}
        self._h2d_done: dict[int, torch.cuda.Event] = {}
        self._pool = None

    # ---- setup helpers --------------------------------------------------------------------------
    def _enable_compile(self) -> None:
        import torch._dynamo as dynamo

        # One compiled variant per step length T; the default limit (8) is too small for
        # T in 1..K+1 plus tree sizes.
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(dynamo.config, name):
                setattr(dynamo.config, name, max(getattr(dynamo.config, name), 64))
        self._pre = torch.compile(_pre_attention, fullgraph=True, dynamic=False)
        self._post = torch.compile(_post_attention, fullgraph=True, dynamic=False)

    def new_cache(self) -> StaticKVCache:
        """Start a new request: the cache is reset (one live request per FastLM)."""
        self._serial += 1
        self.cache = StaticKVCache(self.kv, self._serial)
        return self.cache

    def weight_bytes(self) -> int:
        """Bytes of parameters one decode step must read (layers, final norm, LM head)."""
        n = sum(t.numel() * t.element_size() for lw in self.layers for t in
                (lw.in_norm, lw.wq, lw.bq, lw.wk, lw.bk, lw.wv, lw.bv, lw.wo, lw.bo, lw.post_norm, lw.wg, lw.wu, lw.wd)
                if t is not None)
        return n + self.norm.numel() * self.norm.element_size() + self.head.numel() * self.head.element_size()

    # ---- the forward ----------------------------------------------------------------------------
    def _layers(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, slots: torch.Tensor, lb: int,
                mask_rep: torch.Tensor | None, want: dict[int, str], pre=None, post=None) -> tuple[torch.Tensor, dict]:
        """Run all decoder layers on ``x`` ``(T, d)``, writing K/V at ``slots`` ``(T,) int64``.

        ``mask_rep`` None means a causal prefill chunk occupying the last T of ``lb`` slots.
        Returns the final-normed ``(T, d)`` and the requested hidden states by name.
        """
        pre = pre or _pre_attention
        post = post or _post_attention
        hidden: dict[str, torch.Tensor] = {}
        if 0 in want:
            hidden[want[0]] = x
        for i, lw in enumerate(self.layers):
            q, k, v = pre(x, cos, sin, lw.in_norm, lw.wq, lw.bq, lw.wk, lw.bk, lw.wv, lw.bv, lw.in_eps,
                          self.hq, self.hkv, self.hd)
            kc, vc = self.kv[i, 0], self.kv[i, 1]
            kc.index_copy_(0, slots, k)
            vc.index_copy_(0, slots, v)
            if mask_rep is None:
                a = attend_prefill(q, kc[:lb], vc[:lb], self.scale)
            else:
                a = attend_step(q, kc[:lb], vc[:lb], mask_rep, self.scale)
            x = post(x, a, lw.wo, lw.bo, lw.post_norm, lw.post_eps, lw.wg, lw.wu, lw.wd)
            if i + 1 in want and i + 1 < self.num_layers:
                hidden[want[i + 1]] = x
        h = rms_norm(x, self.norm, self.norm_eps)
        if self.num_layers in want:
            hidden[want[self.num_layers]] = h
        return h, hidden

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
            last_logits: return the ``(V,) float32`` logits of the chunk's last token.

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
        h, hidden = self._layers(embeds.to(self.dtype), cos, sin, slots, start + t, None, want)
        cache.length = start + t
        cache.tree = None
        logits = self._logits(h[-1:])[0] if last_logits else None
        return logits, (self._alias(hidden) if want_hidden else {})

    def _step_body(self, t: int, lb: int, arena: torch.Tensor, mask: torch.Tensor, compiled: bool) -> StepOutput:
        """The step computation on device tensors only (what a CUDA graph captures)."""
        start, base, offset = arena[0], arena[1], arena[2]
        depth = arena[3:3 + t]
        ids = arena[3 + t:3 + 2 * t]
        slots = start + torch.arange(t, device=self.device)
        pos = (base + offset + depth)[None, :].expand(3, t)
        cos, sin = rope_tables(pos, self.inv_freq, self.rope_scaling, self.sections, self.dtype)
        m = step_mask(t, lb, base, mask, self.dtype)
        rep = self.hq // self.hkv
        mask_rep = m[None].expand(rep, t, lb).reshape(rep * t, lb)
        x = F.embedding(ids, self.embed)
        pre, post = (self._pre, self._post) if compiled else (None, None)
        h, hidden = self._layers(x, cos, sin, slots, lb, mask_rep, self._want(), pre, post)
        logits = self._logits(h)
        am = logits.argmax(-1)
        # Strict greedy acceptance of a chain [x_last, d_1..d_K] on the device: the longest prefix
        # of drafts equal to the target's argmax, then the target's token there.
        match = (am[:-1] == ids[1:]).long()
        n = match.cumprod(0).sum()
        accept = torch.stack([n, am.gather(0, n.view(1))[0]])
        return StepOutput(logits, am, accept, self._alias(hidden))

    def _arena_for(self, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        if t not in self._arena:
            self._arena[t] = (torch.zeros(3 + 2 * t, dtype=torch.long, device=self.device),
                              torch.zeros(t, self.max_tree, dtype=torch.bool, device=self.device))
            pin = self.device.type == "cuda"
            self._host[t] = (torch.zeros(3 + 2 * t, dtype=torch.long, pin_memory=pin),
                             torch.zeros(t, self.max_tree, dtype=torch.bool, pin_memory=pin))
        return self._arena[t]

    def _bucket(self, needed: int) -> int:
        lb = int(math.ceil(needed / self.bucket) * self.bucket)
        return min(lb, self.max_len)

    @torch.inference_mode()
    def step(self, tokens: list[int], start: int, base: int, offset: int, depth: list[int],
             tree_mask: torch.Tensor) -> StepOutput:
        """Run ``T`` new tokens at cache slots ``[start, start + T)``.

        Args:
            tokens: the T input token ids.
            start: slot of the first new token (everything before it is kept).
            base: region start; tokens see all slots before it, and region slots per ``tree_mask``.
            offset: RoPE position offset (Qwen2.5-VL's rope delta; 0 for 1-D RoPE).
            depth: per token, position relative to ``base`` (position = base + offset + depth).
            tree_mask: ``(T, R) bool`` region visibility (R <= max_tree on the graph path).

        Returns:
            Views of the step's outputs (valid until the next step).
        """
        t = len(tokens)
        end_region = base + tree_mask.shape[1]
        if start + t > self.max_len or end_region > self.max_len + self.max_tree:
            raise ValueError(f"step past the cache capacity ({self.max_len}); raise max_len")
        use_graph = self.graphs and t <= self.max_step and tree_mask.shape[1] <= self.max_tree
        if not use_graph:
            arena = torch.tensor([start, base, offset, *depth, *tokens], dtype=torch.long, device=self.device)
            lb = start + t
            return self._step_body(t, lb, arena, tree_mask.to(self.device), compiled=False)
        arena, mask = self._arena_for(t)
        host, host_mask = self._host[t]
        # The previous non-blocking copy out of these pinned buffers may still be queued: wait for
        # it before overwriting them (normally long done; this only orders the host writes).
        if t in self._h2d_done:
            self._h2d_done[t].synchronize()
        host[0], host[1], host[2] = start, base, offset
        host[3:3 + t] = torch.tensor(depth, dtype=torch.long)
        host[3 + t:] = torch.tensor(tokens, dtype=torch.long)
        host_mask.zero_()
        host_mask[:, : tree_mask.shape[1]] = tree_mask
        arena.copy_(host, non_blocking=True)
        mask.copy_(host_mask, non_blocking=True)
        done = self._h2d_done.setdefault(t, torch.cuda.Event())
        done.record()
        return self.replay(t, self._bucket(start + t))

    def replay(self, t: int, lb: int) -> StepOutput:
        """Replay (capturing first if needed) the graph of ``T`` tokens over ``lb`` slots.

        The inputs are whatever the T-arena holds now (set by :meth:`step` or by device-side
        chaining in :meth:`greedy_chain`).
        """
        key = (t, lb)
        g = self._graphs.get(key)
        if g is None:
            g = self._capture(t, lb)
        else:
            g.graph.replay()
        return g.out

    def _capture(self, t: int, lb: int) -> _Graph:
        arena, mask = self._arena_for(t)
        stream = torch.cuda.Stream(device=self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        # Warm-up runs execute the step for real (same inputs, same cache slots: idempotent) and
        # trigger compilation/autotuning outside the capture.
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._step_body(t, lb, arena, mask, self.compiled)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            out = self._step_body(t, lb, arena, mask, self.compiled)
        # Capture does not execute: replay once so the outputs (and cache writes) exist.
        graph.replay()
        g = _Graph(graph, out)
        self._graphs[(t, lb)] = g
        log.debug("captured step graph T=%d over %d slots (%d graphs)", t, lb, len(self._graphs))
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


def _has_triton() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True
