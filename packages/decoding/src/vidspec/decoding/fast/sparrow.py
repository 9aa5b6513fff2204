"""``FastSparrowDrafter``: a Sparrow draft (ALGORITHMS.md section 3) on a static cache and CUDA graphs.

A drop-in replacement for :class:`~vidspec.decoding.sparrow.SparrowDrafter` (same constructor
arguments plus engine options, same ``from_pretrained``, same begin/propose/commit protocol and
``cache_length``/``cache_shapes``). It runs the same :class:`~vidspec.decoding.sparrow.SparrowDraftModel`
(its own weights are read in place, no copies) with

- a preallocated text-only KV cache for the one draft layer, ``(1, 2, max_len, kv_heads, head_dim)``
  (a :class:`~vidspec.decoding.fast.lm.StaticKVCache`): rollback after a verify is an O(1) change
  of its length counter. As in the eager drafter, only text positions ever enter it (VATA);
- one *step* for every draft forward after ``begin``: ``T`` tokens (the committed-but-unfed ones
  with the target's penultimate states, or one draft token with the draft's own ĥ) go through
  embed -> fuse with the previous hidden state -> the decoder layer over the cached text positions
  (the functions of :mod:`vidspec.decoding.fast.lm`, which match HF's numerics) -> head norm -> LM
  head -> argmax. All step inputs live in per-``T`` static buffers (an int64 *arena* and a hidden
  buffer), and every step ends by writing the inputs of the next single-token step (its own argmax,
  its ĥ, the next slot and position) into the ``T = 1`` buffers, so
- on CUDA each ``(T, bucket)`` step is captured once as a ``torch.cuda.CUDAGraph`` (attention reads
  the cache up to a multiple of ``bucket`` slots, with a mask hiding slots past each query) and a
  greedy proposal of K tokens is one host-to-device copy of the round's inputs, one graph replay
  for the pending tokens, K - 1 replays of the single-token graph chained on the device, and one
  host synchronisation to read the K tokens back. A step graph is captured the first time its
  ``(T, bucket)`` is met; :meth:`FastSparrowDrafter.warmup` captures all that rounds of K tokens
  can meet ahead of time (T = 1..K+1 over the buckets up to a text length), so no capture lands
  inside a timed decode.

Off CUDA (CI) or with ``graphs=False`` the same step function runs eagerly over the exact cache
length; sampling (``temperature > 0``) runs the same steps with one host round trip per token (the
token is chosen on the host exactly as :class:`SparrowDrafter` does). The prompt's text positions
(``begin``) are fed eagerly in causal chunks.

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

import torch

from vidspec.decoding.fast.lm import (
    StaticKVCache,
    _post_split,
    _pre_split,
    _rope_torch,
    attend_prefill,
    attend_step,
    layer_weights,
    rope_tables,
)
from vidspec.decoding.sparrow import SparrowDrafter, SparrowDraftModel, _Pending
from vidspec.decoding.types import Proposal, TargetModel, TargetState

log = logging.getLogger(__name__)

# Arena layout of a T-token step (int64): [slot, out_index, next_pos (3), pos (3 x T), tokens (T)].
#   slot: cache slot of the first token; out_index: where the step's argmax goes in the token buffer;
#   next_pos: (3,) position ids of the *next* single-token step; pos: the tokens' (3, T) position ids.
_HEAD = 5


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
    graphs: dict  # (T, lb) -> _Graph
    pool: Any = None
    serial: int = 0


class _Graph:
    """One captured step: the CUDA graph and the output buffers it writes."""

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
    """

    def __init__(self, model: SparrowDraftModel, temperature: float = 0.0, top_p: float = 1.0,
                 generator: torch.Generator | None = None, allow_target_mismatch: bool = False, *,
                 max_len: int = 8192, graphs: bool = True, bucket: int = 256, max_step: int = 16,
                 max_draft: int = 64, prefill_chunk: int = 4096):
        super().__init__(model, temperature=temperature, top_p=top_p, generator=generator,
                         allow_target_mismatch=allow_target_mismatch)
        if max_len < 2 or bucket < 1 or max_step < 1 or max_draft < 1 or prefill_chunk < 1:
            raise ValueError("max_len, bucket, max_step, max_draft and prefill_chunk must be positive")
        self.max_len = int(max_len)
        self.want_graphs = bool(graphs)
        self.bucket = int(bucket)
        self.max_step = int(max_step)
        self.max_draft = int(max_draft)
        self.prefill_chunk = int(prefill_chunk)
        self._eng: _Engine | None = None
        # Graph use and bucketed attention are decided per engine (CUDA or not); tests may force
        # bucketed attention on the eager path to exercise the masks over stale slots.
        self._use_graphs = False
        self._bucketed = False
        #: Step graphs captured so far (all engines): a capture inside a timed decode shows up here.
        self.graph_captures = 0

    @property
    def graphs(self) -> bool:
        """Whether steps run as CUDA graphs (known after the first ``begin``)."""
        return self._use_graphs

    # ---- setup ----------------------------------------------------------------------------------
    def _signature(self) -> tuple:
        m = self.model
        sh = m.shared
        norm = m.norm if m.norm is not None else sh.final_norm
        ptrs = tuple(t.data_ptr() for t in (m.fc.weight, m.layer.self_attn.q_proj.weight, m.layer.mlp.down_proj.weight,
                                            sh.lm_head.weight, sh.embed.weight, norm.weight, m.rotary.inv_freq))
        p = m.fc.weight
        return (p.device, p.dtype, ptrs)

    def _engine(self) -> _Engine:
        """Build (or reuse) the static buffers; rebuilt when the draft's or the target's weights moved."""
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
            arenas={}, host={}, h2d_done={}, graphs={},
        )
        on_cuda = dev.type == "cuda"
        self._use_graphs = self.want_graphs and on_cuda
        self._bucketed = self._use_graphs
        self._arena(1)  # every step writes the next single-token step's inputs here
        return self._eng

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
        a1, h1 = self._arena(1)
        slot, outi, nxt = arena[0:1], arena[1:2], arena[2:5]
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
        logits = m.logits(h[-1:]).float()
        am = logits.argmax(-1)
        # Chain: the next single-token step feeds this argmax with this ĥ at the next slot.
        # (The index is clamped: host-loop rounds, longer than the buffer, never read it.)
        e.toks.index_copy_(0, outi.clamp(max=e.toks.shape[0] - 1), am)
        nxt_arena = torch.cat([slot + t, outi + 1, nxt + 1, nxt, am])
        a1.copy_(nxt_arena)
        h1.copy_(h[-1:])
        return _StepOut(h, logits, am)

    def _lb(self, needed: int) -> int:
        if not self._bucketed:
            return needed
        return min(int(math.ceil(needed / self.bucket) * self.bucket), self.max_len)

    def _run(self, t: int, needed: int) -> _StepOut:
        """Run the T-step whose inputs are in the T-arena, its tokens ending at slot ``needed - 1``."""
        lb = self._lb(needed)
        if not (self._use_graphs and t <= self.max_step):
            return self._body(t, lb)
        e = self._eng
        g = e.graphs.get((t, lb))
        if g is None:
            return self._capture(t, lb).out
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

    def _record(self, t: int, lb: int) -> _Graph:
        """Capture the step (capture does not execute it)."""
        e = self._eng
        if e.pool is None:
            e.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=e.pool):
            out = self._body(t, lb)
        return _Graph(graph, out)

    def _capture(self, t: int, lb: int) -> _Graph:
        """Warm up, capture and replay once the ``(T, lb)`` step (its inputs are already loaded)."""
        e = self._eng
        self._arena(t)
        snap = self._snapshot()
        # Warm-up runs execute the step for real: its cache writes are idempotent (same inputs,
        # same slots) but its chaining writes are not, so the chain state is restored after each.
        ctx, stream = self._side_stream()
        with ctx:
            for _ in range(2):
                self._body(t, lb)
                self._restore(snap)
        if stream is not None:
            torch.cuda.current_stream(e.device).wait_stream(stream)
        g = self._record(t, lb)
        e.graphs[(t, lb)] = g
        self.graph_captures += 1
        log.debug("captured Sparrow draft step T=%d over %d slots (%d graphs)", t, lb, len(e.graphs))
        g.replay()  # the real step
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
        full rejection, up to K + 1 after a full acceptance) and chains single-token steps; each
        ``(T, bucket)`` graph is otherwise captured (two eager runs, the capture, a replay) the first
        time a decode meets it, inside that decode's timing. This captures T = 1..K+1 (those up to
        ``max_step``) over every bucket up to the one holding ``max_text`` text positions (prompt text
        + generated tokens + one proposal; default: the first bucket).

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
        for lb in self.warmup_buckets(max_text):
            for t in range(1, min(k + 1, self.max_step) + 1):
                start = max(0, lb - t)
                if (t, lb) in e.graphs or start + t > self.max_len or self._lb(start + t) != lb:
                    continue  # captured already, or no T-step ends in this bucket
                pos = torch.arange(start, start + t, dtype=torch.long).expand(3, t)
                self._load([0] * t, torch.zeros(t, d, dtype=e.dtype, device=e.device), pos, start,
                           torch.full((3,), start + t, dtype=torch.long))
                self._capture(t, lb)
        return self.graph_captures - before

    # ---- inputs -----------------------------------------------------------------------------------
    def _load(self, tokens: list[int], hidden: torch.Tensor, pos3: torch.Tensor, slot: int,
              next_pos: torch.Tensor) -> None:
        """Write a T-step's inputs into its static buffers (one host-to-device copy of the integers)."""
        e = self._eng
        t = len(tokens)
        arena, hid = self._arena(t)
        host = e.host[t]
        done = e.h2d_done.get(t)
        if done is not None:  # the previous non-blocking copy out of this pinned buffer must be done
            done.synchronize()
        host[0], host[1] = slot, 0
        host[2:5] = next_pos
        host[_HEAD:_HEAD + 3 * t] = pos3.reshape(-1)
        host[_HEAD + 3 * t:] = torch.tensor(tokens, dtype=torch.long)
        arena.copy_(host, non_blocking=True)
        if e.device.type == "cuda":
            done = e.h2d_done.setdefault(t, torch.cuda.Event())
            done.record()
        hid.copy_(hidden.to(device=e.device, dtype=e.dtype))

    # ---- the protocol -----------------------------------------------------------------------------
    @torch.inference_mode()
    def begin(self, target: TargetModel, state: TargetState, first_token: int) -> None:
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
        if n:
            self._prefill(ids[feed], hp[(feed - 1).to(hp.device)], self._three(self._prompt_pos[:, feed]))
            self._cache_index.extend(feed.tolist())
        self._pending = _Pending(tokens=[first_token], hidden=[hp[L - 1]], index=[L])

    def _prefill(self, ids: torch.Tensor, hidden: torch.Tensor, pos3: torch.Tensor) -> None:
        """Feed prompt text positions in causal chunks (eager; their ĥ are not needed)."""
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
        p = self._pending
        assert p.tokens, "a round always starts with at least x_last pending"
        t = len(p.tokens)
        start = self.cache.length
        if start + t + k - 1 > self.max_len:
            raise ValueError(f"the draft cache is full ({start} text positions + {t + k - 1} for this proposal "
                             f"> max_len {self.max_len}): raise max_len")
        last_index = p.index[-1]
        self._committed = start + t
        pos = self._three(torch.stack([self._position_of(i) for i in p.index], dim=-1))
        next_pos = self._three(self._position_of(last_index + 1)[:, None])[:, 0]
        self._load(p.tokens, torch.stack(p.hidden), pos, start, next_pos)
        self._pending = _Pending()
        self._cache_index.extend(p.index)
        out = self._run(t, start + t)
        self.cache.length = start + t
        if self.temperature <= 0 and k <= self.max_draft:
            for _ in range(k - 1):
                s = self.cache.length
                self._run(1, s + 1)
                self.cache.length = s + 1
            tokens = self._eng.toks[:k].tolist()  # the one host synchronisation of the round
            self._cache_index.extend(range(last_index + 1, last_index + k))
            self._draft = tokens
            return Proposal(tuple(tokens))
        # Sampling (or a very long greedy chain): choose each token on the host as SparrowDrafter does.
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
