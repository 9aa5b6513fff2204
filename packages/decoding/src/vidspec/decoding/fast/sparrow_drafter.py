"""``FastSparrowDrafter``: a Sparrow draft (docs/algorithms.md, Sparrow) on a static cache and CUDA graphs.

A drop-in replacement for :class:`~vidspec.decoding.drafters.sparrow.SparrowDrafter` (same constructor
arguments plus engine options, same ``from_pretrained``, same begin/propose/commit protocol and
``cache_length``/``cache_shapes``). It runs the same :class:`~vidspec.decoding.drafters.sparrow.SparrowDraftModel`
(its own weights are read in place, no copies) with

- a preallocated text-only KV cache for the one draft layer, ``(1, 2, max_len, kv_heads, head_dim)``
  (a :class:`~vidspec.decoding.fast.lm.StaticKVCache`): rollback after a verify is an O(1) change
  of its length counter. As in the eager drafter, only text positions ever enter it (VATA);
- one *step* for every draft forward after ``begin``: ``T`` tokens (the committed-but-unfed ones
  with the target's penultimate states, or one draft token with the draft's own ĥ) go through
  embed -> fuse with the previous hidden state -> the decoder layer over the cached text positions
  (the functions of :mod:`vidspec.decoding.fast.lm`, which match HF's numerics) -> head norm -> LM
  head -> argmax. The first step's inputs live in per-``T`` static buffers (an int64 *arena* and a
  hidden buffer). A chained step on the kernel path takes the previous step's argmax and ĥ as they
  are (:meth:`FastSparrowDrafter._chain_kernels`); a single step, and every step of the SDPA path,
  ends by writing the inputs of the next single-token step into the ``T = 1`` buffers;
- two ways to run a step: on CUDA with Triton (and a power-of-two head dim) the *kernel path*:
  the Triton RoPE/KV-write and split-K attention kernels of :mod:`vidspec.decoding.fast.kernels`
  (attention over exactly the valid cache, so no buckets), the draft layer's q/k/v and gate/up
  weights fused into single buffers, and two compiled (``torch.compile``) pieces around them (embed + fuse +
  RoPE tables + norm + q/k/v; o-proj + MLP + head norm + LM head + argmax): ~14 kernels per
  chained step, ~35 us of GPU time on an H200 with a 32k draft vocabulary (docs/results.md).
  Otherwise the SDPA path: attention over the cache up to a multiple of ``bucket`` slots with a
  mask hiding slots past each query;
- on CUDA a whole greedy proposal is **one** ``torch.cuda.CUDAGraph``: the pending T-step chained
  with K - 1 single-token steps on the device, one graph per ``(T, k, bucket)`` (bucket 0 on the
  kernel path). A round is then one host-to-device copy of its inputs, one graph launch (5-25 us of
  host time on the H200) and one host synchronisation to read the K tokens back. A graph is
  captured the first time its key is met;
  :meth:`FastSparrowDrafter.warmup` captures all that rounds of K tokens can meet ahead of time, so
  no capture lands inside a timed decode. After it, a greedy round that needs fewer than K tokens (the
  last one before the token budget) still runs the K-token chain and keeps its first k tokens: the
  chain is autoregressive, so those are the k-token chain's tokens, and the warm-up then needs one
  chain length instead of K (17 graphs per bucket at K = 16 instead of 272).

Off CUDA (CI) or with ``graphs=False`` the same steps run eagerly over the exact cache length;
sampling (``temperature > 0``) runs the pending step and then one single-token step per token with
a host round trip each (the token is chosen on the host exactly as :class:`SparrowDrafter` does).
The prompt's text positions (``begin``) are fed through the step graphs in chunks of
``PREFILL_T`` on the kernel path (prompts of up to ``PREFILL_STEPS`` chunks), else eagerly in
causal chunks.

Usage::

    from vidspec.decoding.fast import FastSparrowDrafter, FastStrictVerifier, FastTarget

    target = FastTarget(load_target("Qwen/Qwen2.5-VL-7B-Instruct", device="cuda"), max_len=32768)
    drafter = FastSparrowDrafter.from_pretrained("releases/sparrow-qwen2.5-vl-7b", target)
    dec = SpeculativeDecoder(target, drafter, FastStrictVerifier(), k=5)

Supported draft layers: Qwen2-style (both families' layer types: RMSNorm, GQA attention with q/k/v
biases, SiLU MLP, full attention); others raise ``NotImplementedError`` in ``begin``.
"""

from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from vidspec.decoding.drafters.sparrow import SparrowDrafter, SparrowDraftModel, _Pending
from vidspec.decoding.fast.lm import (
    StaticKVCache,
    _has_triton,
    _post_fused,
    _post_split,
    _pre_fused,
    _pre_split,
    _rope_torch,
    argmax_rows,
    attend_prefill,
    attend_step,
    fuse_layer_weights,
    gc_paused,
    kernels_fit,
    layer_weights,
    raise_recompile_limit,
    rms_norm,
    rope_tables,
)
from vidspec.decoding.types import Proposal, TargetModel, TargetState

log = logging.getLogger(__name__)

# Arena layout of a T-token step (int64): [slot, base, out_index, next_pos (3), pos (3 x T), tokens (T)].
#   slot: cache slot of the first token; base: the same slot (the Triton kernels read [start, base]
#   from the arena's head: the step's tokens attend causally among themselves from ``base`` on);
#   out_index: where the step's argmax goes in the token buffer; next_pos: (3,) position ids of the
#   *next* single-token step; pos: the tokens' (3, T) position ids.
_HEAD = 6
#: Kernel path: prompts of up to PREFILL_STEPS chunks of PREFILL_T text positions are fed through
#: one T-step graph, T = min(PREFILL_T, max_step), every chunk padded to T (one compiled variant and
#: one graph; a typical prompt's two dozen text positions are one launch).
PREFILL_T = 32
PREFILL_STEPS = 16


def _arena_len(t: int) -> int:
    return _HEAD + 4 * t


@dataclass
class _StepOut:
    """Views of one step's outputs (static buffers on the graph path: valid until the next step)."""

    hidden: torch.Tensor  # (T, d) ĥ
    logits: torch.Tensor  # (1, V) float32, last token
    argmax: torch.Tensor  # (1,) int64, last token


@dataclass
class _Engine:
    """Everything a step reads besides the draft model's own modules (built in ``begin``)."""

    signature: tuple
    device: torch.device
    dtype: torch.dtype
    lw: Any  # LayerWeights of the draft layer (references)
    inv_freq: torch.Tensor
    rope_scaling: float
    sections: tuple[int, ...] | None
    hq: int
    hkv: int
    hd: int
    scale: float
    kv: torch.Tensor  # (1, 2, max_len, hkv, hd)
    toks: torch.Tensor  # (max_draft,) int64 tokens of the current proposal
    arenas: dict  # T -> (arena (5 + 4T,) int64, hidden (T, d))
    host: dict  # T -> pinned (5 + 4T,) int64
    h2d_done: dict  # T -> torch.cuda.Event
    graphs: dict  # (T, k, lb) -> _Graph: a T-step chained with k - 1 single-token steps
    kernels: bool = False  # Triton RoPE/KV-write and attention kernels (fused q/k/v, gate/up weights)
    tril: dict | None = None  # T -> (T, T) bool causal region mask of the kernels
    plans: dict | None = None  # (T, k) -> device constants of a kernel-path chain (_chain_kernels)
    step_in: Any = None  # kernel path: embed + fuse + RoPE tables + norm + q/k/v (compiled on CUDA)
    step_out: Any = None  # kernel path: o-proj + MLP + head norm + LM head + argmax (compiled on CUDA)
    pool: Any = None
    serial: int = 0


def _kernel_step_in(ids, hid, pos3, embed, fc_w, fc_b, inv_freq, scaling, sections, dtype, in_norm, eps, wqkv, bqkv):
    """Embed, fuse with the previous hidden state, RoPE tables, input norm and the q/k/v projection.

    Returns ``(z, qkv, cos, sin)``: the layer input ``(T, d)`` (the residual stream), the fused
    projection ``(T, (hq + 2 hkv) hd)`` and the ``(T, hd)`` RoPE tables.
    """
    e = F.embedding(ids, embed)
    z = F.linear(torch.cat([e, hid.to(e.dtype)], dim=-1), fc_w, fc_b)
    cos, sin = rope_tables(pos3, inv_freq, scaling, sections, dtype)
    z, qkv = _pre_fused(z, None, in_norm, eps, wqkv, bqkv)
    return z, qkv, cos, sin


def _kernel_step_out(x, a, wo, bo, post_norm, post_eps, wgu, wd, head_norm, head_eps, head_w, head_b, head_ids=None):
    """Output projection, MLP, head norm, LM head and argmax of the last token: ``(ĥ, logits, argmax)``.

    With ``head_ids`` (a draft vocabulary) the head has those rows only and the argmax is mapped
    back to target token ids.
    """
    x, delta = _post_fused(x, a, wo, bo, post_norm, post_eps, wgu, wd)
    h = x + delta
    logits = F.linear(rms_norm(h[-1:], head_norm, head_eps), head_w, head_b).float()
    am = argmax_rows(logits)
    return h, logits, (am if head_ids is None else head_ids[am])


class _Graph:
    """One captured chain of steps: the CUDA graph and the output buffers of its last step."""

    def __init__(self, graph, out: _StepOut):
        self.graph = graph
        self.out = out

    def replay(self) -> _StepOut:
        self.graph.replay()
        return self.out


class FastSparrowDrafter(SparrowDrafter):
    """:class:`SparrowDrafter` with a static text-only KV cache and CUDA-graph draft steps.

    Args:
        model, temperature, top_p, generator, allow_target_mismatch: as :class:`SparrowDrafter`.
        max_len: capacity of the draft's KV cache in *text* positions (prompt text + generated text
            + one proposal); ``begin``/``propose`` raise ``ValueError`` past it.
        graphs: capture steps as CUDA graphs (CUDA only; ignored elsewhere).
        bucket: on the graph path attention reads the cache up to a multiple of this many slots.
        max_step: longest pending-token step captured as a graph (longer ones run eagerly).
        max_draft: most tokens of one greedy proposal chained on the device (a larger ``k`` falls
            back to one host round trip per token; same tokens).
        prefill_chunk: text positions per chunk when ``begin`` feeds the prompt.
        kernels: run steps through the Triton kernels of :mod:`vidspec.decoding.fast.kernels` (RoPE
            and KV write in one launch, attention over exactly the valid cache, so no buckets) with
            the draft layer's q/k/v and gate/up weights fused into single buffers (in place, as
            :func:`~vidspec.decoding.fast.lm.fuse_layer_weights` does: the draft model still computes
            the same function, but its parameters then share storage). None: on CUDA when Triton is
            importable and the head dim suits the kernels.
        compile: fuse the step's elementwise work (embedding + fusion FC + RoPE tables + norm, and
            MLP + head norm + LM head + argmax) with ``torch.compile`` on the kernel path. None:
            whenever the kernel path runs.
    """

    def __init__(self, model: SparrowDraftModel, temperature: float = 0.0, top_p: float = 1.0,
                 generator: torch.Generator | None = None, allow_target_mismatch: bool = False, *,
                 max_len: int = 8192, graphs: bool = True, bucket: int = 256, max_step: int = 32,
                 max_draft: int = 64, prefill_chunk: int = 4096, kernels: bool | None = None,
                 compile: bool | None = None, head_ids=None):
        super().__init__(model, temperature=temperature, top_p=top_p, generator=generator,
                         allow_target_mismatch=allow_target_mismatch, head_ids=head_ids)
        if max_len < 2 or bucket < 1 or max_step < 1 or max_draft < 1 or prefill_chunk < 1:
            raise ValueError("max_len, bucket, max_step, max_draft and prefill_chunk must be positive")
        self.max_len = int(max_len)
        self.want_graphs = bool(graphs)
        self.bucket = int(bucket)
        self.max_step = int(max_step)
        self.max_draft = int(max_draft)
        self.prefill_chunk = int(prefill_chunk)
        self.want_kernels = kernels
        self.want_compile = compile
        self._pos_cache: tuple | None = None
        self._eng: _Engine | None = None
        # Graph use and bucketed attention are decided per engine (CUDA or not); tests may force
        # bucketed attention on the eager path to exercise the masks over stale slots.
        self._use_graphs = False
        self._bucketed = False
        #: Step graphs captured so far (all engines): a capture inside a timed decode shows up here.
        self.graph_captures = 0
        #: (pending, rows): the pending tokens' states as one block of a verify output (see commit)
        self._block: tuple | None = None
        #: The prompt feed's source rows on the device, by prompt layout (see _feed_source)
        self._feed_src: dict[tuple, torch.Tensor] = {}
        #: The chain length the warm-up captured (graph path, greedy): shorter proposals run it and keep
        #: their first k tokens (see propose_device). None: every proposal runs its own length.
        self._chain_k: int | None = None

    @property
    def graphs(self) -> bool:
        """Whether steps run as CUDA graphs (known after the first ``begin``)."""
        return self._use_graphs

    @property
    def kernels(self) -> bool:
        """Whether steps run through the Triton kernels (known after the first ``begin``)."""
        return self._eng is not None and self._eng.kernels

    # ---- setup ----------------------------------------------------------------------------------
    def _signature(self) -> tuple:
        m = self.model
        sh = m.shared
        norm = m.norm if m.norm is not None else sh.final_norm
        ptrs = tuple(t.data_ptr() for t in (m.fc.weight, m.layer.self_attn.q_proj.weight, m.layer.mlp.down_proj.weight,
                                            sh.lm_head.weight, sh.embed.weight, norm.weight, m.rotary.inv_freq))
        p = m.fc.weight
        return (p.device, p.dtype, ptrs)

    def _use_kernels(self) -> bool:
        m = self.model
        cfg = m.text_config
        hd = int(getattr(m.layer.self_attn, "head_dim", cfg.hidden_size // cfg.num_attention_heads))
        if self.want_kernels is None:
            return m.fc.weight.device.type == "cuda" and _has_triton() and kernels_fit(hd)
        if self.want_kernels and not _has_triton():
            raise RuntimeError("kernels=True needs Triton")
        if self.want_kernels and not kernels_fit(hd):
            raise ValueError(f"kernels=True needs a power-of-two head dim >= 16, this draft's is {hd}")
        return bool(self.want_kernels)

    def _engine(self) -> _Engine:
        """Build (or reuse) the static buffers; rebuilt when the draft's or the target's weights moved."""
        kern = self._use_kernels()
        if kern:
            fuse_layer_weights(self.model.layer)  # before the signature: it moves the q/k/v weights
        sig = self._signature()
        if self._eng is not None and self._eng.signature == sig:
            return self._eng
        m = self.model
        cfg = m.text_config
        if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or [])):
            raise NotImplementedError("FastSparrowDrafter supports full-attention draft layers only")
        lw = layer_weights(m.layer)  # raises NotImplementedError for a non-SiLU MLP
        attn = m.layer.self_attn
        if not all(hasattr(attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj")):
            raise NotImplementedError(f"FastSparrowDrafter needs a Qwen2-style layer, got {type(m.layer).__name__}")
        rot = m.rotary
        if getattr(rot, "rope_type", "default") == "dynamic":
            raise NotImplementedError("dynamic RoPE scaling is not supported by FastSparrowDrafter")
        sections = getattr(rot, "mrope_section", None)
        dev, dtype = m.fc.weight.device, m.fc.weight.dtype
        hq, hkv = int(cfg.num_attention_heads), int(cfg.num_key_value_heads)
        hd = int(getattr(attn, "head_dim", cfg.hidden_size // hq))
        self._eng = _Engine(
            signature=sig, device=dev, dtype=dtype, lw=lw, inv_freq=rot.inv_freq,
            rope_scaling=float(getattr(rot, "attention_scaling", 1.0)),
            sections=tuple(sections) if sections else None, hq=hq, hkv=hkv, hd=hd,
            scale=float(getattr(attn, "scaling", hd ** -0.5)),
            kv=torch.zeros(1, 2, self.max_len, hkv, hd, dtype=dtype, device=dev),
            toks=torch.zeros(self.max_draft, dtype=torch.long, device=dev),
            arenas={}, host={}, h2d_done={}, graphs={}, kernels=kern, tril={}, plans={},
        )
        on_cuda = dev.type == "cuda"
        self._use_graphs = self.want_graphs and on_cuda
        self._bucketed = self._use_graphs and not kern  # the kernels read exactly the valid cache
        if kern:
            self._build_kernel_steps()
        self._arena(1)  # every step writes the next single-token step's inputs here
        return self._eng

    def head_parts(self) -> tuple:
        """``(head_norm, head_eps, head_w, head_b, head_ids)``: the draft head as the kernel-path pieces read it
        (the draft vocabulary's rows and ids with one, else the shared LM head and None)."""
        m = self.model
        sh = m.shared
        norm = m.norm if m.norm is not None else sh.final_norm
        head_eps = float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))
        if self.head_ids is None:
            return norm.weight, head_eps, sh.lm_head.weight, sh.lm_head.bias, None
        return (norm.weight, head_eps, *self._head())

    def compiled(self, fn):
        """``fn`` through ``torch.compile(fullgraph=True, dynamic=False)`` on CUDA unless ``compile=False``
        (one variant per input shape); ``fn`` itself elsewhere."""
        compile_ = self.want_compile if self.want_compile is not None else True
        if compile_ and self._eng.device.type == "cuda":
            raise_recompile_limit()
            return torch.compile(fn, fullgraph=True, dynamic=False)
        return fn

    def _build_kernel_steps(self) -> None:
        """The two per-step pieces around the kernels (compiled on request: one variant per T)."""
        e = self._eng
        m = self.model
        lw = e.lw
        embed, fc_w, fc_b = m.shared.embed.weight, m.fc.weight, m.fc.bias
        head_norm, head_eps, head_w, head_b, head_ids = self.head_parts()

        def step_in(ids, hid, pos3):
            return _kernel_step_in(ids, hid, pos3, embed, fc_w, fc_b, e.inv_freq, e.rope_scaling, e.sections, e.dtype,
                                   lw.in_norm, lw.in_eps, lw.wqkv, lw.bqkv)

        def step_out(x, a):
            return _kernel_step_out(x, a, lw.wo, lw.bo, lw.post_norm, lw.post_eps, lw.wgu, lw.wd, head_norm, head_eps,
                                    head_w, head_b, head_ids)
        e.step_in, e.step_out = self.compiled(step_in), self.compiled(step_out)

    def _arena(self, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        e = self._eng
        assert e is not None
        if t not in e.arenas:
            e.arenas[t] = (torch.zeros(_arena_len(t), dtype=torch.long, device=e.device),
                           torch.zeros(t, self.model.config.hidden_size, dtype=e.dtype, device=e.device))
            e.host[t] = torch.zeros(_arena_len(t), dtype=torch.long, pin_memory=e.device.type == "cuda")
        return e.arenas[t]

    # ---- positions ------------------------------------------------------------------------------
    @staticmethod
    def _three(pos: torch.Tensor) -> torch.Tensor:
        """``(A, n)`` position ids (A = 1 or 3) as ``(3, n)`` (rows equal for 1-D RoPE)."""
        return pos.expand(3, -1) if pos.shape[0] == 1 else pos

    # ---- the step ---------------------------------------------------------------------------------
    def _layer(self, z: torch.Tensor, pos3: torch.Tensor, slots: torch.Tensor, lb: int,
               mask_rep: torch.Tensor | None) -> torch.Tensor:
        """The draft decoder layer on ``z`` ``(T, d)``; writes K/V at ``slots``; returns ĥ ``(T, d)``.

        With ``mask_rep`` the tokens attend to the first ``lb`` slots through that mask; without,
        they are the last T of ``lb`` slots and attend causally (prompt chunks).
        """
        e = self._eng
        lw = e.lw
        cos, sin = rope_tables(pos3, e.inv_freq, e.rope_scaling, e.sections, e.dtype)
        x, qkv = _pre_split(z, None, lw.in_norm, lw.in_eps, lw.wq, lw.bq, lw.wk, lw.bk, lw.wv, lw.bv)
        q, k, v = _rope_torch(qkv, cos, sin, e.hq, e.hkv, e.hd)
        kc, vc = e.kv[0, 0], e.kv[0, 1]
        kc.index_copy_(0, slots, k)
        vc.index_copy_(0, slots, v)
        if mask_rep is None:
            a = attend_prefill(q, kc[:lb], vc[:lb], e.scale)
        else:
            a = attend_step(q, kc[:lb], vc[:lb], mask_rep, e.scale)
        x, delta = _post_split(x, a, lw.wo, lw.bo, lw.post_norm, lw.post_eps, lw.wg, lw.wu, lw.wd)
        return x + delta

    def _body(self, t: int, lb: int) -> _StepOut:
        """One T-token step over ``lb`` cache slots, on device tensors only (what a graph captures).

        Reads the T-arena and T-hidden buffer; writes K/V, the argmax into the token buffer at the
        arena's out index, and the next single-token step's inputs into the 1-arena/1-hidden buffer.
        """
        e = self._eng
        m = self.model
        arena, hid = self._arena(t)
        slot = arena[0:1]
        pos3 = arena[_HEAD:_HEAD + 3 * t].view(3, t)
        ids = arena[_HEAD + 3 * t:_HEAD + 4 * t]
        z = m.fuse(m.embed(ids[None]), hid[None])[0]
        slots = slot + torch.arange(t, device=e.device)
        # Token i (at slot s_i) sees every slot <= s_i: the committed entries and the block up to
        # itself; slots past it (stale entries of a rolled-back proposal, unwritten padding of the
        # bucket) are masked.
        visible = torch.arange(lb, device=e.device)[None, :] <= slots[:, None]
        zero = torch.zeros((), dtype=e.dtype, device=e.device)
        mask = torch.where(visible, zero, torch.full((), float("-inf"), dtype=e.dtype, device=e.device))
        rep = e.hq // e.hkv
        mask_rep = mask[None].expand(rep, t, lb).reshape(rep * t, lb)
        h = self._layer(z, pos3, slots, lb, mask_rep)
        logits = self._logits(h[-1:]).float()
        am = logits.argmax(-1)
        if self.head_ids is not None:
            am = self._head()[2][am]  # draft-vocabulary row -> target token id
        self._chain_next(t, h, am)
        return _StepOut(h, logits, am)

    def _chain_next(self, t: int, h: torch.Tensor, am: torch.Tensor) -> None:
        """Write the next single-token step's inputs: this step's argmax with its ĥ at the next slot.

        Also stores the argmax in the token buffer at the arena's out index (clamped: host-loop
        rounds, longer than the buffer, never read it).
        """
        e = self._eng
        arena, _ = self._arena(t)
        a1, h1 = self._arena(1)
        slot, outi, nxt = arena[0:1], arena[2:3], arena[3:6]
        e.toks.index_copy_(0, outi.clamp(max=e.toks.shape[0] - 1), am)
        a1.copy_(torch.cat([slot + t, slot + t, outi + 1, nxt + 1, nxt, am]))
        h1.copy_(h[-1:])

    def _body_kernels(self, t: int) -> _StepOut:
        """The T-step through the Triton kernels (attention over exactly ``[0, slot + T)``)."""
        arena, hid = self._arena(t)
        pos3 = arena[_HEAD:_HEAD + 3 * t].view(3, t)
        ids = arena[_HEAD + 3 * t:_HEAD + 4 * t]
        h, logits, am = self._kernel_step(ids, hid, pos3, arena, t)
        self._chain_next(t, h, am)
        return _StepOut(h, logits, am)

    def _kernel_step(self, ids: torch.Tensor, hid: torch.Tensor, pos3: torch.Tensor, head: torch.Tensor,
                     t: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One kernel-path step of ``t`` tokens whose kernel arena starts ``[slot, base]`` (``head``):
        ``(ĥ, logits, argmax)``."""
        from vidspec.decoding.fast import kernels

        e = self._eng
        if t not in e.tril:
            e.tril[t] = torch.ones(t, t, dtype=torch.bool, device=e.device).tril()
        z, qkv, cos, sin = e.step_in(ids, hid, pos3)
        kc, vc = e.kv[0, 0], e.kv[0, 1]
        q = kernels.rope_kv_write(qkv, cos, sin, kc, vc, head, e.hq, e.hkv, e.hd)
        a = kernels.decode_attention(q, kc, vc, e.tril[t], head, e.scale)
        return e.step_out(z, a)

    def _chain(self, t: int, k: int, lb: int) -> _StepOut:
        """The T-step, then ``k - 1`` single-token steps each fed by the previous one's argmax (on device).

        The argmaxes land in the token buffer; returns the last step's outputs.
        """
        if self._eng.kernels and k > 1:
            return self._chain_kernels(t, k)
        out = self._step(t, lb)
        for _ in range(k - 1):
            out = self._step(1, lb)
        return out

    def _chain_kernels(self, t: int, k: int) -> _StepOut:
        """:meth:`_chain` on the kernel path, the steps passing their outputs to each other directly.

        Step ``j`` takes step ``j - 1``'s argmax and ĥ as they are (no copies into the 1-arena and
        1-hidden buffers). Every step's kernel arena ``[slot, slot]`` and position ids are laid out
        once, from the T-arena, before the first step; the argmaxes go into the token buffer
        together after the last. That is about nine fewer small kernels per chained step than
        :meth:`_chain_next`. The 1-arena is left as it was (the host-loop path, which reads it,
        runs chains of one step).
        """
        e = self._eng
        arena, hid = self._arena(t)
        ids = arena[_HEAD + 3 * t:_HEAD + 4 * t]
        pos3 = arena[_HEAD:_HEAD + 3 * t].view(3, t)
        key = (t, k)
        if key not in e.plans:  # device constants, made before any capture (warm-ups run first)
            e.plans[key] = (torch.tensor([0, *range(t, t + k - 1)], device=e.device),
                            torch.arange(k - 1, device=e.device), torch.arange(k, device=e.device))
        off, steps, span = e.plans[key]
        # Step j writes slot (and attends from base) arena[0] + off[j]; chained step j sees positions next_pos + j - 1.
        heads = (arena[0:1] + off)[:, None].expand(k, 2).contiguous()
        pos = (arena[3:6][None, :] + steps[:, None])[:, :, None]  # (k - 1, 3, 1)
        ams = []
        for j in range(k):
            h, logits, am = self._kernel_step(ids, hid, pos3, heads[j], t if j == 0 else 1)
            ams.append(am)
            if j < k - 1:
                ids, hid, pos3 = am, h[-1:], pos[j]
        first = arena[2:3]  # the token buffer index of the first argmax (clamped as in _chain_next)
        e.toks.index_copy_(0, (first + span).clamp(max=e.toks.shape[0] - 1), torch.cat(ams))
        return _StepOut(h, logits, am)

    def _step(self, t: int, lb: int) -> _StepOut:
        return self._body_kernels(t) if self._eng.kernels else self._body(t, lb)

    def _lb(self, needed: int) -> int:
        if not self._bucketed:
            return needed
        return min(int(math.ceil(needed / self.bucket) * self.bucket), self.max_len)

    def _key(self, t: int, k: int, needed: int) -> tuple[int, int, int]:
        """Graph key of a chain whose last step's token sits at slot ``needed - 1``.

        ``lb`` is the attended length of every step of the chain (its bucket; 0 on the kernel path,
        which reads the valid length from the arena, and exact off the graph path).
        """
        return t, k, (0 if self._eng.kernels else self._lb(needed))

    def _run(self, t: int, needed: int, k: int = 1) -> _StepOut:
        """Run the T-step whose inputs are in the T-arena, chained with ``k - 1`` single-token steps.

        ``needed`` is the cache length after the chain (its last token at slot ``needed - 1``).
        On the graph path the whole chain is one CUDA graph replay.
        """
        key = self._key(t, k, needed)
        if not (self._use_graphs and t <= self.max_step):
            return self._chain(*key)
        e = self._eng
        g = e.graphs.get(key)
        if g is None:
            return self._capture(key).out
        return g.replay()

    # ---- CUDA graphs ----------------------------------------------------------------------------
    def _snapshot(self) -> list[torch.Tensor]:
        """The state a step mutates besides the cache slots it writes (restored after warm-ups)."""
        e = self._eng
        a1, h1 = self._arena(1)
        return [a1.clone(), h1.clone(), e.toks.clone()]

    def _restore(self, snap: list[torch.Tensor]) -> None:
        e = self._eng
        a1, h1 = self._arena(1)
        for dst, src in zip((a1, h1, e.toks), snap):
            dst.copy_(src)

    def _side_stream(self):
        e = self._eng
        if e.device.type != "cuda":
            return contextlib.nullcontext(), None
        stream = torch.cuda.Stream(device=e.device)
        stream.wait_stream(torch.cuda.current_stream(e.device))
        return torch.cuda.stream(stream), stream

    def _warm_then_record(self, run, record):
        """Run a graph's work twice for real on a side stream (restoring the chain state after each),
        then capture it with ``record()``; returns the graph.

        The warm-ups' cache and record writes are idempotent (same inputs, same slots) but the
        chaining writes of the single-step inputs are not, so those are restored after each run.
        Shared by the chain graphs and :class:`~vidspec.decoding.fast.FastTreeSparrowDrafter`'s rounds.
        """
        snap = self._snapshot()
        ctx, stream = self._side_stream()
        with ctx:
            for _ in range(2):
                run()
                self._restore(snap)
        if stream is not None:
            torch.cuda.current_stream(self._eng.device).wait_stream(stream)
        return record()

    def graph_of(self, fn):
        """Capture ``fn()`` as a CUDA graph in this engine's memory pool: ``(graph, outputs)``.

        Capture does not execute the work; the outputs are the graph's static tensors. Shared by the
        chain graphs and :class:`~vidspec.decoding.fast.FastTreeSparrowDrafter`'s round and post graphs.
        """
        e = self._eng
        if e.pool is None:
            e.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with gc_paused(), torch.cuda.graph(graph, pool=e.pool):
            out = fn()
        return graph, out

    def _record(self, key: tuple[int, int, int]) -> _Graph:
        """Capture the chain ``key = (T, k, lb)`` (capture does not execute it)."""
        return _Graph(*self.graph_of(lambda: self._chain(*key)))

    def _capture(self, key: tuple[int, int, int]) -> _Graph:
        """Warm up, capture and replay once the chain ``key = (T, k, lb)`` (its inputs are already loaded)."""
        e = self._eng
        self._arena(key[0])
        g = self._warm_then_record(lambda: self._chain(*key), lambda: self._record(key))
        e.graphs[key] = g
        self.graph_captures += 1
        log.debug("captured Sparrow draft chain T=%d k=%d over %d slots (%d graphs)", *key, len(e.graphs))
        g.replay()  # the real chain
        return g

    # ---- warm-up ----------------------------------------------------------------------------------
    def warmup_buckets(self, max_text: int | None = None) -> tuple[int, ...]:
        """Attended cache lengths (buckets) of steps whose tokens end at or below ``max_text`` slots.

        Default: the first bucket only. Off the graph path (exact lengths, no graphs) this is empty.
        """
        if not self._bucketed:
            return ()
        top = self._lb(self.bucket if max_text is None else min(max(1, int(max_text)), self.max_len))
        return tuple(sorted({min(b, self.max_len) for b in range(self.bucket, top, self.bucket)} | {top}))

    @torch.inference_mode()
    def warmup(self, target: TargetModel, k: int, max_text: int | None = None) -> int:
        """Capture, before any timed decode, every draft-step graph that rounds of ``k`` tokens can meet.

        A round runs its pending tokens as one T-step (T = 1 at a request's first round or after a
        full rejection, up to K + 1 after a full acceptance) chained with k - 1 single-token steps,
        as one graph per ``(T, k, bucket)`` (k = K, fewer near the token budget, 1 when sampling);
        each is otherwise captured (two eager runs, the capture, a replay) the first time a decode
        meets it, inside that decode's timing. This captures T = 1..K+1 (those up to ``max_step``)
        and k = K (and k = 1, the sampled steps) over every bucket up to the one holding ``max_text``
        text positions (prompt text + generated tokens + one proposal; default: the first bucket; the
        kernel path has no buckets, and also captures the single step of T = ``min(PREFILL_T, max_step)``
        that feeds a prompt). From then on a greedy proposal of fewer than K tokens runs the K-token
        chain (:meth:`propose_device`), so the shorter chains need no graphs of their own.

        Call it between requests: it writes the draft's static cache and ends a live request
        (``begin`` starts the next one). Prepares the draft for ``target`` as ``begin`` does; off CUDA
        or with ``graphs=False`` it captures nothing.

        Returns:
            The number of graphs this call captured (0 when all were captured already).
        """
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        self._prepare_model(target)
        e = self._engine()
        if not self._use_graphs:
            return 0
        self.cache = None  # the warm-up steps overwrite cache slots: a live request cannot go on
        self._pending = _Pending()
        self._draft = []
        before = self.graph_captures
        d = self.model.config.hidden_size
        ends = (1 + k + 1,) if e.kernels else self.warmup_buckets(max_text)
        chain = min(k, self.max_draft)
        self._chain_k = chain if chain >= 2 else None
        for end in ends:
            for t in range(1, min(k + 1, self.max_step) + 1):
                for kk in sorted({1, max(1, chain)}):
                    start = max(0, end - (t + kk - 1))  # the chain's last token at slot end - 1
                    key = self._key(t, kk, start + t + kk - 1)
                    if key in e.graphs or start + t + kk - 1 > self.max_len or (
                            not e.kernels and key[2] != end):
                        continue  # captured already, or no such chain ends in this bucket
                    pos = [list(range(start, start + t))] * 3
                    self._load([0] * t, torch.zeros(t, d, dtype=e.dtype, device=e.device), pos, start,
                               [start + t] * 3)
                    self._capture(key)
        if e.kernels:  # the prompt feed (see _feed_graphs): chunks padded to one T
            t = min(PREFILL_T, self.max_step)
            if self._key(t, 1, t) not in e.graphs and t <= self.max_len:
                self._load([0] * t, torch.zeros(t, d, dtype=e.dtype, device=e.device), [list(range(t))] * 3, 0,
                           [t] * 3)
                self._capture(self._key(t, 1, t))
        return self.graph_captures - before

    # ---- inputs -----------------------------------------------------------------------------------
    def _positions(self, index: list[int]) -> list[list[int]]:
        """Position ids (3 rows) of sequence indices as host integers (no tensor work per round).

        Pending tokens are generated ones (indices from the prompt length on): one step per token
        after the last prompt position on every axis, as :meth:`SparrowDrafter._position_of`.
        """
        if self._pos_cache is None or self._pos_cache[0] is not self._prompt_pos:
            last = self._three(self._last_pos[:, None])[:, 0]
            self._pos_cache = (self._prompt_pos, [int(v) for v in last])
        last = self._pos_cache[1]
        L, pp = self._prompt_len, self._prompt_pos
        return [[int(pp[min(a, pp.shape[0] - 1), i]) if i < L else last[a] + (i - L + 1) for i in index]
                for a in range(3)]

    def _load(self, tokens: list[int], hidden: torch.Tensor | None, pos3: list[list[int]], slot: int,
              next_pos: list[int]) -> None:
        """Write a T-step's inputs into its static buffers (one host-to-device copy of the integers).

        ``pos3``: the tokens' position ids, 3 rows of T; ``next_pos``: the 3 position ids of the
        token after them.
        """
        e = self._eng
        t = len(tokens)
        arena, hid = self._arena(t)
        host = e.host[t]
        done = e.h2d_done.get(t)
        if done is not None:  # the previous non-blocking copy out of this pinned buffer must be done
            done.synchronize()
        host.numpy()[:] = [slot, slot, 0, *next_pos, *pos3[0], *pos3[1], *pos3[2], *tokens]  # no tensor made per round
        arena.copy_(host, non_blocking=True)
        if e.device.type == "cuda":
            if done is None:
                done = e.h2d_done[t] = torch.cuda.Event()
            done.record()
        if hidden is not None:  # None: the caller wrote the states into the buffer already
            hid.copy_(hidden.to(device=e.device, dtype=e.dtype))

    # ---- the protocol -----------------------------------------------------------------------------
    @torch.inference_mode()
    def prepare(self, target: TargetModel, state: TargetState) -> None:
        """:meth:`SparrowDrafter.prepare` on the static cache: the prompt feed is queued on the device (one
        graph launch per chunk of ``PREFILL_T`` on the kernel path), not waited for."""
        self._prepare_model(target)
        ids, L, feed = self._start_prompt(target, state)
        e = self._engine()
        e.serial += 1
        self.cache = StaticKVCache(e.kv, e.serial)
        self._cache_index = []
        self._pending = _Pending()
        self._draft = []
        hp = state.prompt_hidden_penult
        n = int(feed.numel())
        if n + 1 > self.max_len:
            raise ValueError(f"the prompt has {n} text positions to feed but the draft cache holds {self.max_len}: "
                             f"raise max_len")
        if n and e.kernels and self._use_graphs and n <= PREFILL_STEPS * min(PREFILL_T, self.max_step):
            self._feed_graphs(ids, feed.numpy(), hp)
        elif n:
            self._prefill(ids[feed], hp[(feed - 1).to(hp.device)], self._three(self._prompt_pos[:, feed]))
        self._cache_index.extend(feed.tolist())
        self._block = None
        self._prepared = state

    @torch.inference_mode()
    def begin(self, target: TargetModel, state: TargetState, first_token: int) -> None:
        super().begin(target, state, first_token)
        L = self._prompt_len  # the first pending state is the block's only row
        self._block = (self._pending, state.prompt_hidden_penult[L - 1:L])

    def _feed_graphs(self, ids: torch.Tensor, feed: np.ndarray, hp: torch.Tensor) -> None:
        """Feed the prompt text positions ``feed`` through the one captured T-step graph (kernel path).

        ``T = min(PREFILL_T, max_step)``; one launch per chunk of T, a short last chunk padded to T
        (token 0, its last position repeated; its state rows keep whatever the buffer held: finite
        values that only the padded rows read). The padding's K/V land in slots past the cache's
        length, which the kernels never read (they attend over exactly ``[0, slot + T)`` of the step
        that writes there first), and the padded rows come after the real ones, which attend
        causally. The token ids and positions are laid out on the host (numpy) and the target's
        states gathered straight into the step's state buffer: a handful of host operations per
        request. Their ĥ are not needed.
        """
        step = min(PREFILL_T, self.max_step)
        rows = self._prompt_pos.numpy()[:, feed]
        if rows.shape[0] == 1:
            rows = np.repeat(rows, 3, 0)
        toks = ids.cpu().numpy()[feed]
        src = self._feed_source(feed, hp.device)  # the previous position's state feeds each token
        n = int(feed.size)
        for c in range(0, n, step):
            t = min(step, n - c)
            start = self.cache.length
            pad = step - t if start + step <= self.max_len else 0
            _, hid = self._arena(t + pad)
            hid[:t].copy_(hp.index_select(0, src[c:c + t]))
            pos = np.concatenate([rows[:, c:c + t], np.repeat(rows[:, c + t - 1:c + t], pad, 1)], 1)
            self._load(toks[c:c + t].tolist() + [0] * pad, None, pos.tolist(), start, [0, 0, 0])
            self._run(t + pad, start + t + pad, 1)
            self.cache.length = start + t

    def _feed_source(self, feed: np.ndarray, device: torch.device) -> torch.Tensor:
        """``feed - 1`` on the device, kept per prompt layout (requests with the same prompt text and
        video size share it; at most 8 layouts). A new layout's copy comes from pinned memory: a
        copy from pageable memory would wait for the stream, i.e. for the target's prefill that the
        feed is meant to run beside."""
        key = (device, feed.size, feed.tobytes())
        src = self._feed_src.get(key)
        if src is None:
            src = torch.from_numpy(feed - 1)
            if device.type == "cuda":
                src = src.pin_memory()
            src = src.to(device, non_blocking=True)
            if len(self._feed_src) >= 8:
                self._feed_src.pop(next(iter(self._feed_src)))
            self._feed_src[key] = src
        return src

    def _prefill(self, ids: torch.Tensor, hidden: torch.Tensor, pos3: torch.Tensor) -> None:
        """Feed prompt text positions eagerly in causal chunks of ``prefill_chunk`` (their ĥ are not
        needed); the kernel path with graphs uses :meth:`_feed_graphs` instead."""
        e = self._eng
        m = self.model
        ids = ids.to(e.device)
        pos3 = pos3.to(e.device)
        n = ids.shape[0]
        for c in range(0, n, self.prefill_chunk):
            end = min(n, c + self.prefill_chunk)
            start = self.cache.length
            t = end - c
            z = m.fuse(m.embed(ids[None, c:end]), hidden[None, c:end].to(e.dtype))[0]
            slots = torch.arange(start, start + t, device=e.device)
            self._layer(z, pos3[:, c:end], slots, start + t, None)
            self.cache.length = start + t

    @torch.inference_mode()
    def propose(self, k: int) -> Proposal:
        if self.cache is None or self._eng is None:
            raise RuntimeError("begin() first")
        self._draft = []
        if k <= 0:
            return Proposal(())
        if self.temperature <= 0 and k <= self.max_draft:
            toks = self.propose_device(k)
            tokens = toks.tolist()  # the one host synchronisation of the round
            self._draft = tokens
            return Proposal(tuple(tokens))
        return self._propose_sampled(k)

    @torch.inference_mode()
    def propose_device(self, k: int) -> torch.Tensor:
        """A greedy proposal left on the device: ``(k,) int64``, a view of the drafter's token buffer.

        Launches the round (one graph replay on CUDA) and returns without synchronising, so the
        target's verify step can read the tokens on the device
        (:meth:`~vidspec.decoding.fast.FastTarget.verify_device`). The view is valid until the next
        proposal; call :meth:`set_draft` with the tokens once they are read, before :meth:`commit`.
        Greedy only (``temperature <= 0``), ``1 <= k <= max_draft``.
        """
        if self.cache is None or self._eng is None:
            raise RuntimeError("begin() first")
        if self.temperature > 0 or not 1 <= k <= self.max_draft:
            raise ValueError(f"propose_device drafts greedily 1..{self.max_draft} tokens (k={k}, "
                             f"temperature={self.temperature})")
        run = self._chain_length(k)
        start, t, last_index = self._load_pending(run)
        # The pending tokens and run - 1 chained single-token steps: one graph replay on CUDA.
        self._run(t, start + t + run - 1, run)
        self.cache.length = start + t + run - 1
        self._cache_index.extend(range(last_index + 1, last_index + run))
        self._draft = []
        return self._eng.toks[:k]

    def _chain_length(self, k: int) -> int:
        """The chain a proposal of ``k`` tokens runs: the warmed-up length when it is longer and its slots
        fit the cache (its first k tokens are the k-token chain's: each step reads only the ones before),
        else ``k``. The extra slots are speculative like the rest; :meth:`commit` crops them."""
        run = self._chain_k
        if run is None or k >= run or not self._use_graphs:
            return k
        fits = self.cache.length + len(self._pending.tokens) + run - 1 <= self.max_len
        return run if fits else k

    def set_draft(self, tokens: list[int]) -> None:
        """The host copy of the tokens :meth:`propose_device` returned (what :meth:`commit` keeps from)."""
        self._draft = list(tokens)

    def _load_pending(self, k: int) -> tuple[int, int, int]:
        """Load the pending tokens into the T-step inputs (a round of ``k`` draft tokens follows).

        Returns the cache slot of the first pending token, their count and the sequence index of the last.
        """
        p = self._pending
        assert p.tokens, "a round always starts with at least x_last pending"
        t = len(p.tokens)
        start = self.cache.length
        if start + t + k - 1 > self.max_len:
            raise ValueError(f"the draft cache is full ({start} text positions + {t + k - 1} for this proposal "
                             f"> max_len {self.max_len}): raise max_len")
        last_index = p.index[-1]
        self._committed = start + t
        pos = self._positions(p.index)
        self._load(p.tokens, self._pending_hidden(p), pos, start, [row[0] for row in self._positions([last_index + 1])])
        self._pending = _Pending()
        self._cache_index.extend(p.index)
        return start, t, last_index

    def _pending_hidden(self, p: _Pending) -> torch.Tensor:
        """The pending tokens' states as one ``(T, d)`` tensor: the block :meth:`commit` (or ``begin``) took
        them from when they are exactly its first rows (every greedy round), else the rows stacked."""
        block = self._block
        self._block = None
        if block is not None and block[0] is p and block[1].shape[0] == len(p.hidden):
            return block[1]
        return torch.stack(p.hidden)

    def commit(self, n_accepted: int, next_token: int, out) -> None:
        """:meth:`SparrowDrafter.commit`, remembering that the new pending states are the first rows of
        ``out.hidden_penult`` when nothing was pending before (the next round copies them as one block)."""
        fresh = not self._pending.tokens
        super().commit(n_accepted, next_token, out)
        p = self._pending
        self._block = (p, out.hidden_penult[:len(p.hidden)]) if fresh and out.hidden_penult is not None else None

    def _propose_sampled(self, k: int) -> Proposal:
        """Sampling (or a very long greedy chain): choose each token on the host as SparrowDrafter does."""
        start, t, last_index = self._load_pending(k)
        out = self._run(t, start + t)
        self.cache.length = start + t
        a1, _ = self._arena(1)
        tokens, dists = [], []
        for i in range(k):
            tok, dist = self._choose(out.logits[0])
            tokens.append(tok)
            if dist is not None:
                dists.append(dist)
            if i < k - 1:
                a1[_HEAD + 3:_HEAD + 4].fill_(tok)  # the chained inputs, with the chosen token
                s = self.cache.length
                out = self._run(1, s + 1)
                self.cache.length = s + 1
                self._cache_index.append(last_index + i + 1)
        self._draft = tokens
        return Proposal(tuple(tokens), torch.stack(dists) if dists else None)

    # commit() is SparrowDrafter's: it crops the cache to the committed entries (an O(1) length
    # change on the static cache) and queues the accepted tokens with the target's true states.

    # ---- introspection ----------------------------------------------------------------------------
    def cache_shapes(self) -> list[tuple[int, ...]]:
        """Shapes of the valid cached keys, one per layer: ``(1, kv_heads, entries, head_dim)``.

        The preallocated buffer (``capacity``) is fixed; only ``cache_length`` text entries are valid.
        """
        if self.cache is None or self._eng is None:
            return []
        return [(1, self._eng.hkv, int(self.cache.length), self._eng.hd)]

    @property
    def capacity(self) -> int:
        """Text positions the static cache holds (``max_len``)."""
        return self.max_len
