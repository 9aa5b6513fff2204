"""``FastTreeSparrowDrafter``: a Sparrow draft grows its EAGLE-2 tree on the device, one CUDA graph per round.

The same trees as :class:`~vidspec.decoding.drafters.sparrow_tree.TreeSparrowDrafter` (same growth, same rerank,
same commit), on the static cache and step machinery of
:class:`~vidspec.decoding.fast.sparrow_drafter.FastSparrowDrafter` (held as ``chain``: its weights,
prompt feed, pending-token step and arena are reused as they are). What changes is where the tree
grows: every level is tensor work on the device with static shapes, so a whole round

1. the pending step (the committed-but-unfed tokens with the target's penultimate states, ending
   with ``x_last``; the chain drafter's T-step, SDPA or Triton kernels),
2. the root's ``top_k`` children (log-softmax over the head, or the draft vocabulary, then top-k),
3. ``depth - 1`` level passes: the frontier's ``top_k`` nodes go through the draft layer in one
   step that sees the committed prefix, the node's fed ancestors and itself (a ``(top_k, region)``
   ancestor matrix over the tree's cache region), then per row top-k, cumulative scores, and the
   ``top_k`` best of the ``top_k * top_k`` candidates become the next frontier (token, parent
   node, score, feature = the parent row's ĥ, ancestor row = the parent's row plus its own slot).
   On the kernel path a level is the chain's compiled ``step_in`` (embed + fuse + RoPE tables +
   norm + q/k/v), the Triton RoPE/KV-write kernel and the Triton decode-attention kernel with the
   ancestor matrix as its tree mask (exact lengths from a per-level device arena
   ``[committed + (lvl - 1) top_k, committed]``, no buckets), and one piece (:func:`_level_out`,
   compiled on CUDA) for o-proj + MLP + head norm + LM head of all rows and the whole selection;
   otherwise SDPA over a bucket of the cache with an additive mask
   (:func:`~vidspec.decoding.fast.lm.step_mask`) and the selection as separate ops,

is one ``torch.cuda.CUDAGraph`` per ``(T, depth, top_k, bucket)`` on CUDA (bucket 0 on the kernel
path, whose kernels read the lengths from device arenas). Node records (token,
parent, cumulative score) are written into one static ``(3, N) float64`` device buffer (token ids
are exact in float64); after the replay ONE host read brings them back and
:func:`~vidspec.decoding.trees.rerank_tree` keeps the best ``total`` nodes as ``grow_tree``
does. The tree's K/V entries sit past the committed length of the static cache and are simply
left there (the length goes back to the committed prefix, as in a chain rollback).

Node numbering follows :func:`~vidspec.decoding.trees.grow_tree`: the root's children
``0 .. top_k - 1`` in top-k order, then per level ``top_k * top_k`` candidates (frontier row major,
child rank minor), the frontier kept in node order; so on the same draft the trees are identical
(up to float noise between the eager HF layer and the fast path's layer functions, and the order
of exact ties in top-k).

Off CUDA or with ``graphs=False`` the same device-side growth runs eagerly (still one host read).

In a device round (:meth:`FastTreeSparrowDrafter.propose_tree_device`) nothing is read back here:
a second graph per ``(depth, top_k, total)`` reranks the node records on the device
(:func:`~vidspec.decoding.trees.rerank_device`) and builds the verify tree ``[x_last, kept...]``
with its ancestor mask (:func:`~vidspec.decoding.trees.verify_tree_inputs`; ``x_last`` is copied
into a static buffer by the growth), which the target's ``verify_tree_device`` consumes directly.

Usage::

    from vidspec.decoding.fast import FastTarget, FastTreeSparrowDrafter
    from vidspec.decoding.loops.tree import TreeSpeculativeDecoder
    target = FastTarget(load_target("Qwen/Qwen2.5-VL-7B-Instruct", device="cuda"), max_tree=64)
    drafter = FastTreeSparrowDrafter.from_pretrained("releases/sparrow-qwen2.5-vl-7b", target)
    dec = TreeSpeculativeDecoder(target, drafter, total_tokens=48, depth=8, top_k=8, method="tree-sparrow")
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from vidspec.decoding.drafters.sparrow import SparrowDraftModel, _Pending
from vidspec.decoding.drafters.sparrow_tree import TreeSparrowDrafter
from vidspec.decoding.fast.lm import _post_fused, rms_norm, step_mask
from vidspec.decoding.fast.sparrow_drafter import _HEAD, FastSparrowDrafter
from vidspec.decoding.trees import DeviceTree, DraftTree, rerank_device, rerank_tree, verify_tree_inputs
from vidspec.decoding.types import TargetModel

log = logging.getLogger(__name__)


def tree_size(depth: int, top_k: int) -> int:
    """Nodes one growth produces: ``top_k`` root children and ``top_k * top_k`` candidates per further level."""
    return top_k + (depth - 1) * top_k * top_k


def node_depths(depth: int, top_k: int) -> list[int]:
    """Depth of every grown node in growth order (the root's children are depth 1)."""
    return [1] * top_k + [lvl + 1 for lvl in range(1, depth) for _ in range(top_k * top_k)]


def _level_out(x, a, score, node, anc, arena, wo, bo, post_norm, post_eps, wgu, wd, head_norm, head_eps, head_w,
               head_b, head_ids=None):
    """One tree level after the attention kernel (the kernel path): the layer's end, the head, the selection.

    The ``k`` frontier rows ``x`` (the layer input, i.e. the residual stream) and their attention
    output ``a`` go through o-proj + MLP (ĥ of every row), head norm + LM head (logits of every row,
    over the draft vocabulary with ``head_ids``), then per row log-softmax + top-k, cumulative
    scores, and the ``k`` best of the ``k * k`` candidates, kept in node order, become the next
    frontier, as the SDPA path of :meth:`FastTreeSparrowDrafter._grow` selects them (same ops in the
    same order, so the same ties).

    Args:
        x, a: ``(k, d)`` layer input and ``(k, hq * hd)`` attention output of the frontier.
        score: ``(k,) float32`` cumulative scores of the frontier; ``node``: ``(k,) int64`` their node numbers.
        anc: ``(k, R) bool`` region slots each frontier row sees (its own slot included).
        arena: the level's ``(2,) int64`` kernel arena ``[committed + (lvl - 1) k, committed]`` (the
            level number comes from it, so one compiled variant serves every level).

    Returns:
        ``(block, tok, score, node, feat, anc)``: the level's ``(3, k * k) float64`` node records
        (token id, parent node, cumulative score; frontier row major, child rank minor) and the next
        frontier's token ids, scores, node numbers, features (the parent rows' ĥ) and ancestor rows
        (the parent's row plus the next level's own slot).
    """
    k = score.shape[0]
    x, delta = _post_fused(x, a, wo, bo, post_norm, post_eps, wgu, wd)
    h = x + delta
    logits = F.linear(rms_norm(h, head_norm, head_eps), head_w, head_b)
    off = arena[0] - arena[1]  # (lvl - 1) * k: this level's first region column
    block, tok, score, node, parent_row = _select(logits, score, node, k + off * k, head_ids)
    cols = torch.arange(anc.shape[1], device=anc.device)
    own_next = cols[None, :] == (off + k + torch.arange(k, device=anc.device))[:, None]
    return block, tok, score, node, h[parent_row], anc[parent_row] | own_next


def _select(logits, score, node, first, head_ids=None):
    """A level's candidates and the next frontier (both paths of :meth:`FastTreeSparrowDrafter._grow`).

    Per frontier row: log-softmax and top-k of its ``(V,)`` logits, the cumulative scores of its
    ``k`` children; the ``k`` best of the ``k * k`` candidates, kept in node order (as
    :func:`~vidspec.decoding.trees.grow_tree`), become the next frontier.

    Args:
        logits: ``(k, V)`` head logits of the frontier rows (V: the draft vocabulary with ``head_ids``).
        score, node: ``(k,)`` cumulative scores and node numbers of the frontier.
        first: node number of this level's first candidate (an int or a device scalar).

    Returns:
        ``(block, tok, score, node, parent_row)``: the ``(3, k * k) float64`` node records (token id,
        parent node, cumulative score; frontier row major, child rank minor), then the next frontier's
        token ids, scores, node numbers and the frontier rows they grew from.
    """
    k = score.shape[0]
    v, i = torch.log_softmax(logits.float(), -1).topk(k, dim=-1)  # (k, k) per row
    cand = (score[:, None] + v).flatten()
    ctok = (i if head_ids is None else head_ids[i]).flatten()
    parents = node[:, None].expand(k, k).flatten()
    block = torch.stack([ctok.double(), parents.double(), cand.double()])
    best = cand.topk(k).indices.sort().values
    return block, ctok[best], cand[best], first + best, best // k


class _TreeGraph:
    """One captured round: the CUDA graph and its static ``(3, N)`` node-record buffer."""

    def __init__(self, graph, out: torch.Tensor):
        self.graph = graph
        self.out = out

    def replay(self) -> torch.Tensor:
        self.graph.replay()
        return self.out


class FastTreeSparrowDrafter(TreeSparrowDrafter):
    """:class:`TreeSparrowDrafter` whose tree grows on the device (static shapes, CUDA graphs).

    ``begin``, ``commit`` and ``cache_length`` are :class:`TreeSparrowDrafter`'s, working on a
    :class:`~vidspec.decoding.fast.sparrow_drafter.FastSparrowDrafter` (``chain``) instead of an eager
    :class:`~vidspec.decoding.drafters.sparrow.SparrowDrafter`; only :meth:`propose_tree` differs.

    Args:
        model, allow_target_mismatch, head_ids: as :class:`TreeSparrowDrafter`.
        max_len, graphs, bucket, max_step, prefill_chunk, kernels, compile: the
            :class:`~vidspec.decoding.fast.sparrow_drafter.FastSparrowDrafter` options. ``max_len`` must
            also hold one round's tree entries (``(depth - 1) * top_k``); ``max_step`` is the
            longest pending step a round graph includes (longer rounds run eagerly); on the SDPA
            graph path the tree levels attend over the cache up to a multiple of ``bucket`` slots
            (the kernel path reads exact lengths: its round graphs have no buckets). With
            ``kernels`` the pending step and the tree levels run through the Triton kernels.
    """

    #: The chain drafter class (tests put an emulation of the graph path here).
    chain_class: type[FastSparrowDrafter] = FastSparrowDrafter

    def __init__(self, model: SparrowDraftModel, allow_target_mismatch: bool = False,
                 head_ids: Sequence[int] | torch.Tensor | None = None, *, max_len: int = 8192,
                 graphs: bool = True, bucket: int = 256, max_step: int = 32, prefill_chunk: int = 4096,
                 kernels: bool | None = None, compile: bool | None = None):
        self.chain = self.chain_class(model, allow_target_mismatch=allow_target_mismatch, head_ids=head_ids,
                                      max_len=max_len, graphs=graphs, bucket=bucket, max_step=max_step,
                                      prefill_chunk=prefill_chunk, kernels=kernels, compile=compile)
        self.model = self.chain.model
        self.name = "tree-" + self.chain.name
        self._eng_seen = None  # the chain engine the graphs and buffers below were made for
        self._depth_tensors: dict[tuple[int, int], torch.Tensor] = {}  # node_depths on the device
        self._graphs: dict[tuple[int, int, int, int], _TreeGraph] = {}
        self._records: dict[tuple[int, int], torch.Tensor] = {}
        self._roots: dict[tuple[int, int], torch.Tensor] = {}  # x_last of the last growth, per (depth, top_k)
        #: Post graphs (rerank + verify tree) per (depth, top_k, total): device rounds on CUDA.
        self._post_graphs: dict[tuple[int, int, int], tuple[torch.cuda.CUDAGraph, DeviceTree]] = {}
        self._level_fn = None  # kernel path: the level's end (see _level_out), compiled on CUDA
        #: Round graphs captured so far (a capture inside a timed decode shows up here).
        self.graph_captures = 0
        #: Tree levels run through the Triton kernels so far (counted when a growth runs eagerly or is
        #: captured, not per graph replay).
        self.kernel_levels = 0

    @classmethod
    def from_pretrained(cls, path: str | Path, target: TargetModel | None = None, *,
                        allow_target_mismatch: bool = False, draft_vocab: int | None = None,
                        **options) -> FastTreeSparrowDrafter:
        """Load a Sparrow release (``draft_vocab``: its most frequent tokens; ``options``: the engine options)."""
        chain = FastSparrowDrafter.from_pretrained(path, target, allow_target_mismatch=allow_target_mismatch,
                                                   draft_vocab=draft_vocab)
        d = cls(chain.model, allow_target_mismatch=allow_target_mismatch, head_ids=chain.head_ids, **options)
        d.chain._checked = chain._checked
        return d

    @property
    def graphs(self) -> bool:
        """Whether rounds run as CUDA graphs (known after the first ``begin``)."""
        return self.chain.graphs

    @property
    def kernels(self) -> bool:
        """Whether the pending step and the tree levels run through the Triton kernels (known after ``begin``)."""
        return self.chain.kernels

    # ---- the device-side growth -------------------------------------------------------------------
    def _sync_engine(self) -> None:
        """Drop graphs and buffers made for an older chain engine (rebuilt when weights moved)."""
        e = self.chain._eng
        if self._eng_seen is not e:
            self._eng_seen = e
            self._graphs = {}
            self._records = {}
            self._roots = {}
            self._post_graphs = {}
            self._depth_tensors = {}
            self._level_fn = None

    def _record_buffer(self, depth: int, top_k: int) -> torch.Tensor:
        """The static ``(3, N) float64`` node records of a ``(depth, top_k)`` growth: token, parent, score."""
        key = (depth, top_k)
        if key not in self._records:
            e = self.chain._eng
            self._records[key] = torch.zeros(3, tree_size(depth, top_k), dtype=torch.float64, device=e.device)
        return self._records[key]

    def _root_buffer(self, depth: int, top_k: int) -> torch.Tensor:
        """The static ``(1,) int64`` root (``x_last``) of the last ``(depth, top_k)`` growth, written by the growth."""
        key = (depth, top_k)
        if key not in self._roots:
            self._roots[key] = torch.zeros(1, dtype=torch.long, device=self.chain._eng.device)
        return self._roots[key]

    def _level_out_fn(self):
        """The kernel path's level end (:func:`_level_out` on this draft's weights), built once per engine.

        Compiled as the chain's step pieces are (``torch.compile(fullgraph=True, dynamic=False)``, on
        CUDA, unless ``compile=False``): one variant per ``(top_k, depth)`` shape serves every level.
        """
        if self._level_fn is None:
            c = self.chain
            lw = c._eng.lw
            head_norm, head_eps, head_w, head_b, head_ids = c.head_parts()

            def level_out(x, a, score, node, anc, arena):
                return _level_out(x, a, score, node, anc, arena, lw.wo, lw.bo, lw.post_norm, lw.post_eps, lw.wgu,
                                  lw.wd, head_norm, head_eps, head_w, head_b, head_ids)
            self._level_fn = c.compiled(level_out)
        return self._level_fn

    def _token_ids(self, idx: torch.Tensor) -> torch.Tensor:
        """Head rows -> target token ids (the draft vocabulary's ids; unchanged without one)."""
        c = self.chain
        return idx if c.head_ids is None else c._head()[2][idx]

    def _grow(self, t: int, depth: int, top_k: int, lb: int) -> torch.Tensor:
        """The pending T-step and the whole tree growth, device tensors only (what a round graph captures).

        Reads the chain's T-arena (pending tokens, their slot and positions, the position of depth
        1) and T-hidden buffer; writes the pending and tree K/V into the static cache (tree entries
        at the ``(depth - 1) * top_k`` slots after the committed prefix) and the node records.

        Args:
            t: pending tokens (the last is ``x_last``, the root).
            depth, top_k: the tree's shape.
            lb: cache slots every attention reads (>= the committed prefix plus the tree entries; the
                kernel path ignores it: its kernels read the exact lengths from device arenas).

        Returns:
            The ``(3, N) float64`` node records (see :meth:`_record_buffer`).
        """
        c, m = self.chain, self.model
        e = c._eng
        dev = e.device
        arena, _ = c._arena(t)
        rec = self._record_buffer(depth, top_k)
        self._root_buffer(depth, top_k).copy_(arena[_HEAD + 4 * t - 1:_HEAD + 4 * t])  # the last pending token
        k = top_k
        # Read before the step: it writes the next single-token step's inputs into the 1-arena,
        # which is this arena when T = 1.
        committed = arena[0:1] + t  # (1,) int64: first slot of the tree region
        pos1 = arena[3:6].clone()  # (3,) position ids of depth 1 (the position after x_last)
        out = c._step(t, lb)  # the chain's pending step: x_last's ĥ and logits come last
        score, idx = torch.log_softmax(out.logits[0].float(), -1).topk(k)
        tok = self._token_ids(idx)
        rec[0, :k] = tok
        rec[1, :k] = -1
        rec[2, :k] = score
        feat = out.hidden[-1:].expand(k, -1)  # each depth-1 node is fed with the root's ĥ
        node = torch.arange(k, device=dev)
        if e.kernels:
            if depth > 1:
                self._levels_kernels(depth, k, committed, pos1, tok, score, node, feat.contiguous(), rec)
            return rec
        rows = torch.arange(k, device=dev)
        region = (depth - 1) * k
        cols = torch.arange(max(region, 1), device=dev)
        anc = torch.zeros(k, cols.shape[0], dtype=torch.bool, device=dev)  # region slots each frontier row sees
        rep = e.hq // e.hkv
        head_ids = c.head_parts()[4]
        first = k
        for lvl in range(1, depth):
            own = (lvl - 1) * k + rows  # this level's region columns, one per frontier row
            anc = anc | (cols[None, :] == own[:, None])  # each row also sees its own slot (no host scalar)
            z = m.fuse(m.embed(tok[None]), feat[None])[0]
            pos3 = (pos1 + (lvl - 1))[:, None].expand(3, k)  # siblings share the position of their depth
            mask = step_mask(k, lb, committed, anc, e.dtype)
            mask_rep = mask[None].expand(rep, k, lb).reshape(rep * k, lb)
            h = c._layer(z, pos3, committed + own, lb, mask_rep)
            block, tok, score, node, parent_row = _select(c._logits(h), score, node, first, head_ids)
            rec[:, first:first + k * k] = block
            feat, anc = h[parent_row], anc[parent_row]
            first += k * k
        return rec

    def _levels_kernels(self, depth: int, k: int, committed: torch.Tensor, pos1: torch.Tensor, tok: torch.Tensor,
                        score: torch.Tensor, node: torch.Tensor, feat: torch.Tensor, rec: torch.Tensor) -> None:
        """The ``depth - 1`` tree levels through the Triton kernels (device tensors only, graph-capturable).

        Level ``lvl`` feeds the ``k`` frontier nodes at region slots ``(lvl - 1) k + row``, i.e. its
        kernel arena is ``[committed + (lvl - 1) k, committed]``: RoPE + K/V write at those slots, and
        attention over ``[0, committed + lvl k)`` where a query sees every slot before ``committed``
        and the region slots its ``anc`` row allows (its ancestors and itself): the visibility of the
        SDPA path's :func:`~vidspec.decoding.fast.lm.step_mask`. Per level: the compiled ``step_in``
        (embed + fuse + RoPE tables + norm + q/k/v), the two kernels, and :func:`_level_out`.
        Writes the levels' node records into ``rec[:, k:]``.
        """
        from vidspec.decoding.fast import kernels

        c = self.chain
        e = c._eng
        dev = e.device
        nl = depth - 1
        region = nl * k
        lv = torch.arange(nl, device=dev)
        arenas = torch.stack([committed + lv * k, committed.expand(nl)], 1)  # (nl, 2): one kernel arena per level
        pos = pos1[None, :, None] + lv[:, None, None].expand(nl, 3, k)  # (nl, 3, k): siblings share their depth's
        anc = torch.arange(region, device=dev)[None, :] == torch.arange(k, device=dev)[:, None]  # level 1: own slots
        kc, vc = e.kv[0, 0], e.kv[0, 1]
        level_out = self._level_out_fn()
        blocks = []
        for lvl in range(1, depth):
            arena = arenas[lvl - 1]
            z, qkv, cos, sin = e.step_in(tok, feat, pos[lvl - 1])
            q = kernels.rope_kv_write(qkv, cos, sin, kc, vc, arena, e.hq, e.hkv, e.hd)
            a = kernels.decode_attention(q, kc, vc, anc.contiguous(), arena, e.scale)  # rows of stride R
            block, tok, score, node, feat, anc = level_out(z, a, score, node, anc, arena)
            blocks.append(block)
            self.kernel_levels += 1
        rec[:, k:].copy_(torch.cat(blocks, 1) if len(blocks) > 1 else blocks[0])

    def _key(self, t: int, depth: int, top_k: int, needed: int) -> tuple[int, int, int, int]:
        """Graph key of a round: ``(T, depth, top_k, lb)`` (lb 0 on the kernel path, which has no buckets)."""
        return t, depth, top_k, (0 if self.chain._eng.kernels else self._lb(needed))

    def _lb(self, needed: int) -> int:
        """Attended slots of a round graph: ``needed`` up to a multiple of ``bucket`` (capped at ``max_len``)."""
        c = self.chain
        return min(int(math.ceil(needed / c.bucket) * c.bucket), c.max_len)

    def _run(self, t: int, depth: int, top_k: int, needed: int) -> torch.Tensor:
        """Run (eagerly, or as one graph replay) a round whose inputs are in the chain's T-arena."""
        c = self.chain
        if not (c._use_graphs and t <= c.max_step):
            return self._grow(t, depth, top_k, needed)
        key = self._key(t, depth, top_k, needed)
        g = self._graphs.get(key)
        if g is None:
            return self._capture(key).out
        return g.replay()

    # ---- CUDA graphs ------------------------------------------------------------------------------
    def _record(self, key: tuple[int, int, int, int]) -> _TreeGraph:
        """Capture the round ``key = (T, depth, top_k, lb)`` (capture does not execute it)."""
        return _TreeGraph(*self.chain.graph_of(lambda: self._grow(*key)))

    def _capture(self, key: tuple[int, int, int, int]) -> _TreeGraph:
        """Warm up, capture and replay once the round ``key`` (its inputs are already loaded)."""
        self._record_buffer(key[1], key[2])  # allocated outside the capture: the replay writes it
        self._root_buffer(key[1], key[2])
        g = self.chain._warm_then_record(lambda: self._grow(*key), lambda: self._record(key))
        self._graphs[key] = g
        self.graph_captures += 1
        log.debug("captured Sparrow tree round T=%d depth=%d top_k=%d over %d slots (%d graphs)", *key,
                  len(self._graphs))
        g.replay()  # the real round
        return g

    # ---- the protocol -----------------------------------------------------------------------------
    @torch.inference_mode()
    def propose_tree(self, depth: int, top_k: int, total: int) -> DraftTree:
        """Grow the tree on the device (one graph replay on CUDA), read it once, keep the best ``total``."""
        if depth < 1:
            if self.chain.cache is None or self.chain._eng is None:
                raise RuntimeError("begin() first")
            return DraftTree((), (), ())
        rec = self._grow_round(depth, top_k)
        tokens, parents, scores = rec.cpu().tolist()  # the one host synchronisation of the round
        return rerank_tree([int(x) for x in tokens], [int(x) for x in parents], scores,
                           node_depths(depth, top_k), total)

    def _grow_round(self, depth: int, top_k: int) -> torch.Tensor:
        """Load the pending tokens and launch the growth (``depth >= 1``): the node records (on the device).

        The tree's cache entries are speculative: afterwards the cache keeps the committed prefix
        (``x_last`` included).
        """
        c = self.chain
        if c.cache is None or c._eng is None:
            raise RuntimeError("begin() first")
        vocab = c.model.config.vocab_size if c.head_ids is None else int(c.head_ids.numel())
        if not 1 <= top_k <= vocab:
            raise ValueError(f"top_k must be in [1, {vocab}] (the draft vocabulary), got {top_k}")
        self._sync_engine()
        p = c._pending
        assert p.tokens, "a round always starts with at least x_last pending"
        t = len(p.tokens)
        start = c.cache.length
        committed = start + t
        needed = committed + (depth - 1) * top_k
        if needed > c.max_len:
            raise ValueError(f"the draft cache is full ({start} text positions + {needed - start} for this tree "
                             f"> max_len {c.max_len}): raise max_len")
        last_index = p.index[-1]
        c._load(p.tokens, torch.stack(p.hidden), c._positions(p.index), start,
                [row[0] for row in c._positions([last_index + 1])])
        c._pending = _Pending()
        c._cache_index.extend(p.index)
        rec = self._run(t, depth, top_k, needed)
        c.cache.length = committed
        return rec

    @torch.inference_mode()
    def propose_tree_device(self, depth: int, top_k: int, total: int) -> DeviceTree:
        """:meth:`propose_tree` without a host synchronisation: the grown tree reranked on the device.

        The same nodes in the same order as :meth:`propose_tree` (:func:`~vidspec.decoding.trees.rerank_device`),
        as device tensors, so a target's ``verify_tree_device`` can run on them straight away.
        """
        self._grow_round(depth, top_k)
        if not self.chain._use_graphs:
            return self._post(depth, top_k, total)
        key = (depth, top_k, total)
        g = self._post_graphs.get(key) or self._capture_post(key)
        g[0].replay()
        return g[1]

    def _post(self, depth: int, top_k: int, total: int) -> DeviceTree:
        """Rerank the last growth's node records and build the verify tree ``[x_last, kept...]`` (device only).

        Static shapes, no host reads: on CUDA one graph per ``(depth, top_k, total)`` (about forty small
        kernels that would otherwise be launched one by one every round).
        """
        key = (depth, top_k)
        rec = self._record_buffer(depth, top_k)
        if key not in self._depth_tensors:
            self._depth_tensors[key] = torch.tensor(node_depths(depth, top_k), dtype=torch.long, device=rec.device)
        tokens, parents, scores, depths = rerank_device(rec[0], rec[1], rec[2], self._depth_tensors[key], total)
        verify = verify_tree_inputs(self._root_buffer(depth, top_k), tokens, parents, depths, depth)
        return DeviceTree(tokens, parents, scores, depths, depth, verify)

    def _capture_post(self, key: tuple[int, int, int]) -> tuple[torch.cuda.CUDAGraph, DeviceTree]:
        """Capture :meth:`_post` for ``key = (depth, top_k, total)``, after running it for real on a side stream,
        and keep it in ``_post_graphs``.

        Its outputs are the graph's static tensors: a later replay overwrites the DeviceTree returned
        before, which the round has consumed by then (the target reads it in the same round).
        """
        g = self._post_graphs[key] = self.chain._warm_then_record(lambda: self._post(*key),
                                                                   lambda: self._record_post(key))
        self.graph_captures += 1
        log.debug("captured Sparrow tree post-processing depth=%d top_k=%d total=%d", *key)
        return g

    def _record_post(self, key: tuple[int, int, int]) -> tuple[torch.cuda.CUDAGraph, DeviceTree]:
        """The CUDA graph of :meth:`_post` and its static outputs (capture does not execute it)."""
        return self.chain.graph_of(lambda: self._post(*key))

    # ---- warm-up ----------------------------------------------------------------------------------
    @torch.inference_mode()
    def warmup(self, target: TargetModel, depth: int, top_k: int, max_text: int | None = None,
               total: int | None = None) -> int:
        """Capture, before any timed decode, the round graphs that trees of ``(depth, top_k)`` can meet.

        Pending steps of T = 1..``depth + 1`` (up to ``max_step``) for every depth ``1..depth``
        (shallower trees near the token budget), over every bucket up to the one holding
        ``max_text`` text positions plus a tree (default: the first bucket; the kernel path has no
        buckets, and also captures the chain's prompt-feed step graphs). Call it between
        requests: it writes the draft's static cache and ends a live request (``begin`` starts the
        next one). Off CUDA or with ``graphs=False`` it captures nothing.

        With ``total``, also the device rounds' post-processing graphs (rerank + verify tree, one per
        depth ``1..depth``: :meth:`propose_tree_device`).

        Returns:
            The number of graphs this call captured.
        """
        c = self.chain
        c._prepare_model(target)
        e = c._engine()
        self._sync_engine()
        if not c._use_graphs:
            return 0
        if e.kernels:
            c.warmup(target, 0)  # the prompt feed's step graphs (the kernel path feeds prompts through them)
        c.cache = None  # the warm-up rounds overwrite cache slots: a live request cannot go on
        c._pending = _Pending()
        before = self.graph_captures
        d = self.model.config.hidden_size
        top = self._lb(c.bucket if max_text is None else min(max(1, int(max_text)), c.max_len))
        ends = sorted({min(b, c.max_len) for b in range(c.bucket, top, c.bucket)} | {top})
        if e.kernels:
            ends = [0]  # no buckets: one graph per (T, depth, top_k), warmed up at the start of the cache
        for end in ends:
            for dep in range(1, depth + 1):
                for t in range(1, min(depth + 1, c.max_step) + 1):
                    span = t + (dep - 1) * top_k
                    start = max(0, end - span)
                    if start + span > c.max_len:
                        continue
                    key = self._key(t, dep, top_k, start + span)
                    if key in self._graphs or key[3] != end:
                        continue
                    pos = [list(range(start, start + t))] * 3
                    c._load([0] * t, torch.zeros(t, d, dtype=e.dtype, device=e.device), pos, start,
                            [start + t] * 3)
                    self._capture(key)
        if total is not None:
            for dep in range(1, depth + 1):
                if (dep, top_k, total) not in self._post_graphs:
                    self._capture_post((dep, top_k, total))
        return self.graph_captures - before
