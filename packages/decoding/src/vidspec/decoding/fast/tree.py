"""Tree drafting: an EAGLE-2-style dynamic draft tree verified in one target pass.

Usage::

    from vidspec.decoding.fast import FastTarget, TreeModelDrafter, TreeSpeculativeDecoder
    target = FastTarget(load_target("tiny-qwen2.5-vl"))
    drafter = TreeModelDrafter(FastTarget(load_target("tiny-qwen2.5-vl-draft")))
    dec = TreeSpeculativeDecoder(target, drafter, total_tokens=30, depth=4, top_k=8)
    result = dec.generate(Request("Describe the video.", clip), max_new_tokens=64)

**The tree** (EAGLE-2, built from the draft model's own distributions): the root is the last
emitted token ``x_last``; its ``top_k`` most likely children form depth 1. At each further depth
the current frontier (``top_k`` nodes) is run through the draft in one tree-masked pass, every
frontier node proposes its ``top_k`` most likely children, and the ``top_k`` children with the
highest *cumulative* draft log-probability become the next frontier. After ``depth`` levels all
generated nodes are reranked by cumulative log-probability and the best ``total_tokens`` are kept
(ties broken towards shallower nodes, so a kept node's parent is always kept).

**Tree attention and positions.** Every node attends to the committed prefix, to its ancestors
and to itself (:func:`tree_mask_and_depth`). A node's position is the root's position plus its
depth: for Qwen2.5-VL the three M-RoPE axes of a text token are equal, so a node at depth ``d``
gets ``(p, p, p)`` with ``p = cache length + rope delta + d``, exactly the position it would have
in a chain; siblings share positions.

**Strict verification is lossless on a tree**: starting at the root, follow the child whose token
equals the target's argmax at the current node; stop when no child matches. The followed nodes are
accepted, the target's argmax at the last one is the bonus/correction token. This is the longest
path the target itself would have produced, so greedy output is token-identical to AR decoding.

**Loose verifiers (LVSpec, PST, FLy) on a tree** [choice]: the tree is reduced to its *best path*
and the chain verifier decides along it. The best path follows strict matches from the root as far
as they go (the strictly accepted path), then continues through the child with the highest
cumulative draft score down to a leaf. The chain verifier sees that path as a proposal, with the
target rows of its nodes as the verify output; its decision ``n`` keeps the first ``n`` path
nodes. A loose rule can therefore only extend the strict path, at the first mismatch and beyond,
along the draft's most confident continuation; with :class:`StrictVerifier` it reduces to the
strict tree rule above. The kept nodes' K/V were computed with tree attention over exactly their
ancestors, so keeping them is a cache compaction, never a recomputation.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from vidspec.decoding.drafters import DraftPrefillStart
from vidspec.decoding.engine import clip_at_stop, collect_result, prepare_drafter, stream_text
from vidspec.decoding.models.base import HFVideoTarget
from vidspec.decoding.types import (
    Decision,
    GenerationResult,
    Proposal,
    Request,
    StepRecord,
    TargetModel,
    TargetState,
    Verifier,
    VerifyContext,
    VerifyOutput,
)
from vidspec.decoding.verifiers.strict import StrictVerifier


def tree_mask_and_depth(parents: list[int]) -> tuple[torch.Tensor, list[int]]:
    """Ancestor mask and depths of a tree given by parent indices.

    Args:
        parents: per node, the index of its parent (an earlier node) or -1 for a root.

    Returns:
        ``(N, N) bool`` mask (row i: the ancestors of i and i itself) and per-node depths
        (roots 0).
    """
    n = len(parents)
    mask = torch.zeros(n, n, dtype=torch.bool)
    depth: list[int] = []
    for i, p in enumerate(parents):
        if not -1 <= p < i:
            raise ValueError(f"node {i}: parent {p} must be -1 or an earlier node")
        if p >= 0:
            mask[i] = mask[p]
        mask[i, i] = True
        depth.append(0 if p < 0 else depth[p] + 1)
    return mask, depth


@dataclass(frozen=True)
class DraftTree:
    """Draft nodes below the root ``x_last``, parents before children.

    Attributes:
        tokens: node tokens.
        parents: per node, the index of its parent node, -1 for children of the root.
        scores: cumulative draft log-probabilities (root = 0).
    """

    tokens: tuple[int, ...]
    parents: tuple[int, ...]
    scores: tuple[float, ...]

    def __len__(self) -> int:
        return len(self.tokens)

    def with_root(self, root: int) -> tuple[list[int], list[int]]:
        """Tokens and parents of the verify tree ``[x_last, nodes...]`` (node i becomes i + 1)."""
        return [root, *self.tokens], [-1, *[p + 1 for p in self.parents]]


@dataclass(frozen=True)
class DeviceTree:
    """A :class:`DraftTree` left on the device (a drafter's ``propose_tree_device``), parents before children.

    Attributes:
        tokens, parents, scores, depths: ``(N,)`` tensors (parents -1 for children of the root,
            depths from 1).
        max_depth: the tree's depth (bounds the ancestor walk of :func:`verify_tree_inputs`).
        verify: the verify tree ``[x_last, nodes...]`` already built on the device by the drafter
            (:func:`verify_tree_inputs`' four tensors, e.g. inside its round graph), or None for the
            target to build it.
    """

    tokens: torch.Tensor
    parents: torch.Tensor
    scores: torch.Tensor
    depths: torch.Tensor
    max_depth: int
    verify: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def __len__(self) -> int:
        return int(self.tokens.shape[0])


def best_path(tokens: list[int], parents: list[int], scores: list[float], argmax: list[int]) -> tuple[list[int], int]:
    """The path a verifier decides along (see the module docstring).

    Args:
        tokens, parents: the verify tree (node 0 = root ``x_last``).
        scores: cumulative draft scores per node (root included).
        argmax: the target's greedy token per node.

    Returns:
        Node indices root to leaf and the number of strictly matching nodes after the root.
    """
    children: dict[int, list[int]] = defaultdict(list)
    for i, p in enumerate(parents):
        if p >= 0:
            children[p].append(i)
    path, cur, matched, strict = [0], 0, 0, True
    while children[cur]:
        kids = children[cur]
        hit = [c for c in kids if tokens[c] == argmax[cur]] if strict else []
        if hit:
            cur = hit[0]
            matched += 1
        else:
            strict = False
            cur = max(kids, key=lambda c: scores[c])
        path.append(cur)
    return path, matched


#: One level pass of a tree drafter: given the frontier (node indices) and the tree so far (tokens,
#: parents, depths), run the draft over those nodes and return each one's best children: ``(n, w)``
#: log-probabilities and token ids, on the CPU.
LevelFn = Callable[[list[int], list[int], list[int], list[int]], tuple[torch.Tensor, torch.Tensor]]


def grow_tree(root: tuple[torch.Tensor, torch.Tensor], level: LevelFn, depth: int, top_k: int, total: int) -> DraftTree:
    """EAGLE-2 growth and rerank, shared by the tree drafters (see the module docstring).

    Args:
        root: ``(w,)`` log-probabilities and token ids of the root's best children (depth 1), CPU.
        level: the drafter's level pass (:data:`LevelFn`); called ``depth - 1`` times.
        depth: tree depth.
        top_k: frontier width (the ``top_k`` children of best cumulative score go on).
        total: nodes kept.
    """
    tokens: list[int] = []
    parents: list[int] = []
    scores: list[float] = []
    depths: list[int] = []
    for s, t in zip(root[0].tolist(), root[1].tolist()):
        tokens.append(t)
        parents.append(-1)
        scores.append(s)
        depths.append(1)
    frontier = list(range(len(tokens)))
    for _ in range(depth - 1):
        v, i = level(frontier, tokens, parents, depths)
        cand = (torch.tensor([scores[f] for f in frontier])[:, None] + v).flatten()
        width = v.shape[1]
        first_new = len(tokens)
        for n, (s, t) in enumerate(zip(cand.tolist(), i.flatten().tolist())):
            f = frontier[n // width]
            tokens.append(t)
            parents.append(f)
            scores.append(s)
            depths.append(depths[f] + 1)
        best = torch.topk(cand, min(top_k, cand.numel())).indices.tolist()
        frontier = sorted(first_new + b for b in best)
    return rerank_tree(tokens, parents, scores, depths, total)


def rerank_tree(tokens: list[int], parents: list[int], scores: list[float], depths: list[int],
                total: int) -> DraftTree:
    """Keep the ``total`` best grown nodes (the end of :func:`grow_tree`, shared by the fast tree drafter).

    Best cumulative score first, shallower first on ties, then the earlier node (keeps the set
    ancestor-closed: a child never scores above its parent). The kept nodes are renumbered
    parents before children (by depth, then by growth order).

    Args:
        tokens, parents, scores, depths: every grown node in growth order (parents -1 at depth 1).
        total: nodes kept.
    """
    # np.lexsort sorts by its last key first and is stable, so ties fall to depth, then to growth
    # order (the index): the order of sorting by (-score, depth, index), a tenth of its host time.
    sc = np.asarray(scores, dtype=np.float64)
    dp = np.asarray(depths, dtype=np.int64)
    order = np.lexsort((dp, -sc))[:total]
    keep = order[np.lexsort((order, dp[order]))].tolist()
    new_index = {n: j for j, n in enumerate(keep)}
    return DraftTree(
        tokens=tuple(tokens[n] for n in keep),
        parents=tuple(new_index[parents[n]] if parents[n] >= 0 else -1 for n in keep),
        scores=tuple(scores[n] for n in keep),
    )


def rerank_device(tokens: torch.Tensor, parents: torch.Tensor, scores: torch.Tensor, depths: torch.Tensor,
                  total: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`rerank_tree` on device tensors, no host synchronisation: the same nodes in the same order.

    Args:
        tokens, parents, scores, depths: ``(N,)`` every grown node in growth order (parents -1 at
            depth 1; tokens/parents/depths integer-valued, scores float).
        total: nodes kept (at most N).

    Returns:
        ``(total,)`` tokens and parents (int64, renumbered parents-first), scores, depths.
    """
    n = scores.shape[0]
    total = min(total, n)
    dp = depths.long()
    # Stable sorts, least significant key first: by depth, then by score (descending). Ties keep
    # growth order, so this is np.lexsort((depth, -score)), rerank_tree's order.
    o1 = torch.argsort(dp, stable=True)
    order = o1[torch.argsort(-scores[o1], stable=True)]
    keep = torch.sort(order[:total]).values  # growth order, then stably by depth
    keep = keep[torch.argsort(dp[keep], stable=True)]
    pos = torch.full((n,), -1, dtype=torch.long, device=scores.device)
    pos[keep] = torch.arange(total, device=scores.device)
    par = parents[keep].long()
    new_par = torch.where(par >= 0, pos[par.clamp(min=0)], torch.full_like(par, -1))
    return tokens[keep].long(), new_par, scores[keep], dp[keep]


def verify_tree_inputs(root: int | torch.Tensor, tokens: torch.Tensor, parents: torch.Tensor, depths: torch.Tensor,
                       max_depth: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The verify tree ``[root, nodes...]`` of a device-side draft tree, on the device.

    Static shapes and no host reads, so it can be captured in a CUDA graph (with ``root`` a device tensor).

    Args:
        root: ``x_last``: an int, or a one-element device tensor (read on the device).
        tokens, parents, depths: ``(N,)`` draft nodes, parents first (parents -1 = children of the root,
            depths from 1).
        max_depth: the deepest node's depth (bounds the ancestor walk).

    Returns:
        ``(N + 1,)`` tokens, parents (node i + 1's parent index, -1 for the root) and depths, and the
        ``(N + 1, N + 1) bool`` ancestor mask (row i: the ancestors of i and i itself), as
        :func:`tree_mask_and_depth` would build them.
    """
    dev = tokens.device
    n = tokens.shape[0] + 1
    head = root.reshape(1).long() if isinstance(root, torch.Tensor) else torch.full((1,), root, dtype=torch.long, device=dev)
    tok = torch.cat([head, tokens.long()])
    par = torch.cat([torch.full((1,), -1, dtype=torch.long, device=dev), parents.long() + 1])
    dep = torch.cat([torch.zeros(1, dtype=torch.long, device=dev), depths.long()])
    # Reachability by repeated squaring (a few small kernels, no host reads): R = I | parent, and each
    # pass doubles the path length it covers, so ceil(log2(max_depth)) passes reach every ancestor.
    # The float products count paths (at most n), so "> 0" is exact.
    parent = torch.nn.functional.one_hot(par.clamp(min=0), n).bool() & (par >= 0)[:, None]
    reach = (torch.eye(n, dtype=torch.bool, device=dev) | parent).float()
    for _ in range(max(0, math.ceil(math.log2(max(1, max_depth))))):
        reach = ((reach @ reach) > 0).float()
    return tok, par, dep, reach > 0


class TreeDrafter(Protocol):
    """What :class:`TreeSpeculativeDecoder` needs from a tree drafter."""

    name: str
    need: frozenset[str]  # target outputs the drafter reads ("penult", ...), requested at prefill and verify

    def begin(self, target: TargetModel, state: TargetState, first_token: int) -> None: ...

    def propose_tree(self, depth: int, top_k: int, total: int) -> DraftTree: ...

    def commit(self, accepted: list[int], next_token: int, out: VerifyOutput | None = None) -> None: ...


class TreeModelDrafter(DraftPrefillStart):
    """A separate small VLM drafts an EAGLE-2 dynamic tree (greedy / top-k by draft probability).

    The draft model must support tree sessions (:class:`~vidspec.decoding.fast.FastTarget`, which
    runs eagerly on CPU); an eager adapter passed here is wrapped in one.

    Args:
        model: the draft model (same family and vocabulary as the target).
    """

    def __init__(self, model):
        from vidspec.decoding.fast.target import FastTarget

        if isinstance(model, HFVideoTarget):
            model = FastTarget(model)
        self.model = model
        self.name = f"tree:{model.name}"
        self.need: frozenset[str] = frozenset()
        self._state: TargetState | None = None
        self._seq: list[int] = []
        self._base = 0

    def _draft_prefill(self, state: TargetState) -> TargetState:
        return self.model.prefill(state.request)

    @torch.inference_mode()
    def propose_tree(self, depth: int, top_k: int, total: int) -> DraftTree:
        """Grow the tree (``depth`` draft passes) and keep the best ``total`` nodes."""
        state = self._state
        assert state is not None, "begin() first"
        m = self.model
        pending = self._seq[state.length - self._base:]
        out = m.verify(state, pending)
        committed = state.length
        session: dict[int, int] = {}  # node -> index in the draft's tree session
        fed = [0]

        def level(frontier, tokens, parents, depths):
            pars = [session[parents[f]] if parents[f] >= 0 else -1 for f in frontier]
            lv = m.verify_tree(state, [tokens[f] for f in frontier], pars)
            for j, f in enumerate(frontier):
                session[f] = fed[0] + j
            fed[0] += len(frontier)
            v, i = torch.log_softmax(lv.logits.float(), -1).topk(top_k, dim=-1)
            return v.cpu(), i.cpu()

        v, i = torch.log_softmax(out.logits[-1].float(), -1).topk(top_k)
        tree = grow_tree((v.cpu(), i.cpu()), level, depth, top_k, total)
        m.rollback(state, committed)
        return tree

    def commit(self, accepted: list[int], next_token: int, out: VerifyOutput | None = None) -> None:
        """The target kept ``accepted`` draft tokens (a path) and then emitted ``next_token``.

        ``out`` (the target's rows of the path, unused here) is what a drafter that feeds on target
        states reads (:class:`~vidspec.decoding.fast.TreeSparrowDrafter`).
        """
        self._seq.extend(accepted)
        self._seq.append(next_token)


def _rows(x: torch.Tensor | None, idx: torch.Tensor) -> torch.Tensor | None:
    return None if x is None else x.index_select(0, idx.to(x.device))  # no copy when idx is there already


class TreeSpeculativeDecoder:
    """Draft a dynamic tree, verify it in one target pass, keep the best accepted path.

    Greedy only (temperature 0). The target must implement ``verify_tree`` and ``commit_tree``
    (:class:`~vidspec.decoding.fast.FastTarget`, or the eager adapters).

    Args:
        target: the model whose output we want.
        drafter: a :class:`TreeModelDrafter` or :class:`~vidspec.decoding.fast.TreeSparrowDrafter`
            (its ``need`` joins the verifier's; its ``commit`` gets the target's rows of the kept path).
        verifier: a chain verifier applied along the best path (default strict, lossless).
        total_tokens: draft nodes kept per tree (the verify pass runs ``total_tokens + 1``).
        depth: tree depth (draft passes per round).
        top_k: children per expanded node and frontier width.
        method: label carried into results.
        device_rounds: when the drafter grows its tree on the device (``propose_tree_device``,
            :class:`~vidspec.decoding.fast.FastTreeSparrowDrafter`) and the target verifies device trees
            (``verify_tree_device``, :class:`~vidspec.decoding.fast.FastTarget`), the rerank and the
            verify tree's mask are built on the device and the verify step is launched right after
            the growth, with one synchronisation per round (the same trees and decisions; ``draft_s``
            is then the growth's launch, as in :class:`~vidspec.decoding.engine.SpeculativeDecoder`).
    """

    def __init__(self, target, drafter: TreeDrafter, verifier: Verifier | None = None, total_tokens: int = 30,
                 depth: int = 4, top_k: int = 8, method: str = "tree-sd", device_rounds: bool = True):
        if total_tokens < 1 or depth < 1 or top_k < 1:
            raise ValueError("total_tokens, depth and top_k must be >= 1")
        self.target = target
        self.drafter = drafter
        self.verifier = verifier or StrictVerifier()
        self.total_tokens = total_tokens
        self.depth = depth
        self.top_k = top_k
        self.method = method
        self.device_rounds = device_rounds

    @property
    def k(self) -> int:
        """The most draft tokens one round can accept (the tree's depth; a chain decoder's K)."""
        return self.depth

    def _rounds(self, request: Request, max_new_tokens: int, timings: dict) -> Iterator[tuple[list[int], StepRecord | None]]:
        target, drafter, verifier = self.target, self.drafter, self.verifier
        device = target.device
        eos = target.eos_token_ids
        need_verify = frozenset(drafter.need | verifier.need)
        need_prefill = need_verify | ({"visual"} if "mid" in verifier.need else frozenset())
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        sync()
        t0 = time.perf_counter()
        state = target.prefill(request, need_prefill)
        timings["draft_prefill_s"] = prepare_drafter(drafter, target, state)
        first = int(state.first_logits.argmax())
        sync()
        t1 = time.perf_counter()
        timings["prefill_s"] = t1 - t0
        yield [first], None
        emitted = 1
        if first in eos or emitted >= max_new_tokens:
            timings.update(finish="eos" if first in eos else "length", decode_s=0.0)
            return
        tb = time.perf_counter()
        drafter.begin(target, state, first)
        timings["begin_s"] = time.perf_counter() - tb  # host time (the prompt's part ran in prepare, in the prefill)
        ctx = VerifyContext(state=state, stop_ids=eos)
        x_last = first
        on_device = (self.device_rounds and callable(getattr(drafter, "propose_tree_device", None))
                     and callable(getattr(target, "verify_tree_device", None)))

        def next_round(emitted: int):
            """The next round's depth (never past the budget) and, for a device round, its growth launched
            now: growth, rerank and the verify inputs stay on the device (None: a host round)."""
            depth = max(0, min(self.depth, max_new_tokens - emitted - 1))
            grow = on_device and depth > 0
            return depth, (drafter.propose_tree_device(depth, self.top_k, self.total_tokens) if grow else None)  # type: ignore[attr-defined]

        ts = time.perf_counter()
        depth, dtree = next_round(emitted)
        while True:
            if dtree is not None:
                tv = time.perf_counter()
                out, (tokens, parents, scores, argmax) = target.verify_tree_device(  # type: ignore[attr-defined]
                    state, x_last, dtree, need_verify)  # one synchronisation reads it all
            else:
                tree = drafter.propose_tree(depth, self.top_k, self.total_tokens) if depth > 0 else DraftTree((), (), ())
                sync()
                tv = time.perf_counter()
                tokens, parents = tree.with_root(x_last)
                scores = [0.0, *tree.scores]
                out = target.verify_tree(state, tokens, parents, need_verify)
                # A FastTarget's verify step computes the greedy tokens on the device already.
                greedy = getattr(out, "argmax", None)
                argmax = (greedy if greedy is not None else out.logits.argmax(-1)).tolist()
            path, matched = best_path(tokens, parents, scores, argmax)
            idx = torch.tensor(path, dtype=torch.long).to(out.logits.device)  # one copy for every gather
            chain = VerifyOutput(
                logits=_rows(out.logits, idx),
                hidden_last=_rows(out.hidden_last, idx),
                hidden_penult=_rows(out.hidden_penult, idx),
                hidden_mid=_rows(out.hidden_mid, idx),
            )
            proposal = Proposal(tuple(tokens[n] for n in path[1:]))
            if type(verifier) is StrictVerifier:
                # Greedy strict verification along the path is the match count best_path found (it
                # follows matching children first): no second argmax and host read of the logits.
                decision: Decision = Decision(matched, argmax[path[matched]], ("strict",) * matched)
            else:
                decision = verifier.verify(proposal, chain, ctx)
            n = decision.n_accepted
            target.commit_tree(state, path[: n + 1])
            accepted = list(proposal.tokens[:n])
            drafter.commit(accepted, decision.next_token, chain)  # chain: the target's rows of the path
            if dtree is None:
                sync()  # a device round was read back in full above; its commit's work is queued in order
            te = time.perf_counter()
            new, stop = clip_at_stop([*accepted, decision.next_token], eos, emitted, max_new_tokens)
            x_last = decision.next_token
            if stop is None:  # the next growth is launched before this round's bookkeeping, as for chains
                depth, dtree = next_round(emitted + len(new))
            kinds = decision.kinds[: len(new)]
            step = StepRecord(drafted=len(tokens) - 1, accepted=n, emitted=len(new),
                              loose_accepted=sum(k == "loose" for k in kinds),
                              shift_accepted=sum(k == "shift" for k in kinds), draft_s=tv - ts, verify_s=te - tv)
            ts = te  # the next round starts where this one ended
            emitted += len(new)
            yield new, step
            if stop is not None:
                sync()  # the last commit's device work (the KV compaction) counts in the decode
                timings.update(finish=stop, decode_s=time.perf_counter() - t1)
                return

    @staticmethod
    def _check(max_new_tokens: int, temperature: float) -> None:
        if temperature > 0:
            raise ValueError("tree decoding is greedy only (temperature 0)")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")

    @torch.inference_mode()
    def generate(self, request: Request, max_new_tokens: int = 128, temperature: float = 0.0, top_p: float = 1.0,
                 seed: int | None = None) -> GenerationResult:
        """Decode one request greedily to the end (see :meth:`SpeculativeDecoder.generate`).

        ``top_p`` and ``seed`` are accepted for the same call signature and have no effect (greedy).
        """
        self._check(max_new_tokens, temperature)
        timings: dict = {}
        return collect_result(self.method, self.target, self._rounds(request, max_new_tokens, timings), timings,
                              time.perf_counter())

    @torch.inference_mode()
    def stream(self, request: Request, max_new_tokens: int = 128, temperature: float = 0.0, top_p: float = 1.0,
               seed: int | None = None) -> Iterator[str]:
        """Yield text pieces as rounds finish, decoded as :meth:`SpeculativeDecoder.stream` decodes them."""
        self._check(max_new_tokens, temperature)
        yield from stream_text(self.target.decode, (new for new, _ in self._rounds(request, max_new_tokens, {})))
