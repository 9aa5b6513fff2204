"""Draft trees: the data structures and tensor operations shared by every tree drafter and backend.

- :class:`DraftTree` (host lists) and :class:`DeviceTree` (device tensors): one round's tree, its
  nodes in growth order with parents, depths and cumulative draft log-probabilities.
- :func:`grow_tree`: EAGLE-2 growth from a level function (top-k children per frontier node, the
  top-k by cumulative score become the next frontier), then :func:`rerank_tree` keeps the best
  ``total`` nodes (:func:`rerank_device` is the same rerank on the device).
- :func:`best_path`: strict acceptance on a tree (follow the target's argmax from the root).
- :func:`tree_mask_and_depth` and :func:`verify_tree_inputs`: tree attention masks and positions.

The decoding loop that uses them is :class:`vidspec.decoding.loops.tree.TreeSpeculativeDecoder`
(its module docstring describes the algorithm).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch


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
