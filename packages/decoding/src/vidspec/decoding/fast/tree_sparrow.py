"""Tree drafting with a Sparrow draft: an EAGLE-2 dynamic tree grown by the one-layer text-only draft.

Usage::

    from vidspec.decoding.fast import TreeSparrowDecoder, TreeSparrowDrafter
    target = load_target("data/releases/synthvid-target")
    drafter = TreeSparrowDrafter.from_pretrained("data/releases/sparrow-synthvid", target)
    dec = TreeSparrowDecoder(target, drafter, total_tokens=16, depth=5, top_k=4)
    result = dec.generate(Request("Describe the video.", clip), max_new_tokens=64)

Trees are reached from Python only (as :class:`~vidspec.decoding.fast.TreeModelDrafter` is):
``build_decoder`` and the CLI build chain decoders.

**The tree** is grown as :class:`~vidspec.decoding.fast.TreeModelDrafter` grows it (EAGLE-2: a
frontier of ``top_k`` nodes, each proposing its ``top_k`` most likely children, the ``top_k``
children of best cumulative draft log-probability forming the next frontier; at the end the best
``total`` nodes are kept, shallower first on ties). What differs is the draft step:

- **Inputs.** A node ``x`` at depth ``d`` enters the draft as ``z = FC([e_x ; ĥ_parent])``, where
  ``ĥ_parent`` is the draft's own output at the node's parent (at depth 1, its output at the root
  ``x_last``, which was fed with the target's state). This is what the chain
  :class:`~vidspec.decoding.sparrow.SparrowDrafter` does for draft steps after the first; with
  ``top_k = 1`` the tree *is* that chain.
- **Attention and positions.** The draft's cache holds the committed text prefix only (VATA, no
  visual entries). Each frontier level is one pass in which a node attends to that prefix, to its
  fed ancestors and to itself; its position is the root's position plus its depth (for Qwen2.5-VL
  the M-RoPE text position ``(p, p, p)``, for LLaVA-OV the 1-D position), the position it would
  have in a chain. Siblings share positions. The speculative entries are cropped at the end of
  :meth:`TreeSparrowDrafter.propose_tree`.
- **Commit.** Like the chain drafter, the accepted tokens and the bonus token are queued with the
  target's *true* penultimate states of the accepted path (the draft's own ĥ are never kept), so
  after a round the drafter's cache and pending inputs equal the chain drafter's after the same
  accepted tokens.

The tree decoder (:class:`~vidspec.decoding.fast.TreeSpeculativeDecoder`) hands a drafter only
``commit(accepted, next_token)``; the target states reach the drafter through a verifier wrapper
(:meth:`TreeSparrowDrafter.tap`) that asks the target for ``penult`` rows and records the rows of
the decided path. :class:`TreeSparrowDecoder` installs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from vidspec.decoding.fast.tree import DraftTree, TreeSpeculativeDecoder
from vidspec.decoding.models.base import crop_cache
from vidspec.decoding.sparrow import SparrowDrafter, SparrowDraftModel
from vidspec.decoding.types import (
    Decision,
    Proposal,
    TargetModel,
    TargetState,
    Verifier,
    VerifyContext,
    VerifyOutput,
)
from vidspec.decoding.verifiers.strict import StrictVerifier


class _PenultTap:
    """A verifier that also hands the target's penultimate states of the decided path to a drafter.

    ``need`` adds ``penult`` to the wrapped verifier's (so prefill keeps the prompt's states too);
    every other attribute is the wrapped verifier's.
    """

    def __init__(self, inner: Verifier, drafter: TreeSparrowDrafter):
        self.inner = inner
        self.drafter = drafter
        self.name = inner.name
        self.need = frozenset(inner.need) | {"penult"}

    def verify(self, proposal: Proposal, out: VerifyOutput, ctx: VerifyContext) -> Decision:
        # Row 0 is x_last, row j the j-th node of the path the verifier decides along.
        self.drafter._path_penult = out.hidden_penult
        return self.inner.verify(proposal, out, ctx)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


class TreeSparrowDrafter:
    """A Sparrow draft grows an EAGLE-2 dynamic tree (eager PyTorch, CPU or CUDA; greedy).

    Per-step inputs, positions, the text-only cache and the draft vocabulary are those of a
    :class:`~vidspec.decoding.sparrow.SparrowDrafter` held inside (``chain``); this class adds the
    tree-masked level passes and the tree's commit.

    Args:
        model: the Sparrow draft (bound to the target in ``begin`` if not bound yet).
        allow_target_mismatch: skip the fingerprint check in ``begin``.
        head_ids: a draft vocabulary (see ``SparrowDrafter``): children are the best tokens within
            it; None drafts over the whole vocabulary.
    """

    need: frozenset[str] = frozenset({"penult"})

    def __init__(self, model: SparrowDraftModel, allow_target_mismatch: bool = False,
                 head_ids: Sequence[int] | torch.Tensor | None = None):
        self.chain = SparrowDrafter(model, allow_target_mismatch=allow_target_mismatch, head_ids=head_ids)
        self.model = self.chain.model
        self.name = "tree-" + self.chain.name
        self._path_penult: torch.Tensor | None = None

    @classmethod
    def from_pretrained(cls, path: str | Path, target: TargetModel | None = None, *,
                        allow_target_mismatch: bool = False, draft_vocab: int | None = None) -> TreeSparrowDrafter:
        """Load a Sparrow release (``draft_vocab``: its most frequent tokens as the draft vocabulary)."""
        chain = SparrowDrafter.from_pretrained(path, target, allow_target_mismatch=allow_target_mismatch,
                                               draft_vocab=draft_vocab)
        d = cls(chain.model, allow_target_mismatch=allow_target_mismatch, head_ids=chain.head_ids)
        d.chain._checked = chain._checked
        return d

    def tap(self, verifier: Verifier) -> _PenultTap:
        """``verifier`` wrapped so that the tree decoder's verify pass feeds this drafter's commit."""
        return _PenultTap(verifier, self)

    def begin(self, target: TargetModel, state: TargetState, first_token: int) -> None:
        if state.prompt_hidden_penult is None:
            raise RuntimeError("TreeSparrowDrafter needs the target's penultimate states: decode with "
                               "TreeSparrowDecoder (or give TreeSpeculativeDecoder the verifier drafter.tap(v))")
        self.chain.begin(target, state, first_token)
        self._path_penult = None

    def _children(self, h: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(n, d)`` ĥ -> the ``k`` best next tokens per row: ``(n, k)`` log-probs and token ids, on CPU."""
        lp = torch.log_softmax(self.chain._logits(h).float(), -1)
        v, i = lp.topk(min(k, lp.shape[-1]), dim=-1)
        v, i = v.cpu(), i.cpu()
        if self.chain.head_ids is not None:
            i = self.chain.head_ids[i]
        return v, i

    def _feed_level(self, tokens: list[int], feats: list[torch.Tensor], index: list[int],
                    ancestors: list[list[int]], committed: int) -> torch.Tensor:
        """One tree-masked draft pass over a frontier; returns its ``(n, d)`` ĥ.

        Args:
            tokens: the frontier's tokens.
            feats: per node the ``(d,)`` feature input (its parent's ĥ).
            index: per node its sequence index (root index + depth), which gives its position.
            ancestors: per node the cache slots of its fed ancestors (counted from ``committed``).
            committed: cache entries of the committed prefix, visible to every node.
        """
        c, model = self.chain, self.model
        dev = feats[0].device
        ids = torch.tensor([tokens], dtype=torch.long, device=dev)
        z = model.fuse(model.embed(ids), torch.stack(feats)[None])
        pos = torch.stack([c._position_of(i) for i in index], dim=-1).to(dev)[:, None, :]  # (A, 1, n)
        past, n = c.cache.get_seq_length(), len(tokens)
        allowed = torch.zeros(n, past + n, dtype=torch.bool)
        allowed[:, :committed] = True
        for j, anc in enumerate(ancestors):
            allowed[j, [committed + a for a in anc]] = True
            allowed[j, past + j] = True
        out = model.run_layer(z, pos, allowed.to(dev)[None, None], cache=c.cache)
        c._cache_index.extend(index)
        return out[0]

    @torch.inference_mode()
    def propose_tree(self, depth: int, top_k: int, total: int) -> DraftTree:
        """Grow the tree (one draft pass for the pending tokens, ``depth - 1`` level passes), keep the best ``total``."""
        c = self.chain
        if c.cache is None:
            raise RuntimeError("begin() first")
        if depth < 1:
            return DraftTree((), (), ())
        root_index = c._pending.index[-1] if c._pending.tokens else c._cache_index[-1]
        committed = c.cache.get_seq_length() + len(c._pending.tokens)
        h_root = c._feed_pending()
        assert h_root is not None, "a round always starts with at least x_last pending"
        tokens: list[int] = []
        parents: list[int] = []
        scores: list[float] = []
        depths: list[int] = []
        feats: list[torch.Tensor] = []  # per node: its draft input feature, the parent's ĥ
        v, i = self._children(h_root[None], top_k)
        for s, t in zip(v[0].tolist(), i[0].tolist()):
            tokens.append(t)
            parents.append(-1)
            scores.append(s)
            depths.append(1)
            feats.append(h_root)
        frontier = list(range(len(tokens)))
        slots: dict[int, list[int]] = {}  # fed node -> cache slots (after the prefix) of it and its ancestors
        fed = 0
        for _ in range(depth - 1):
            anc = [slots[parents[f]] if parents[f] >= 0 else [] for f in frontier]
            h = self._feed_level([tokens[f] for f in frontier], [feats[f] for f in frontier],
                                 [root_index + depths[f] for f in frontier], anc, committed)
            for j, f in enumerate(frontier):
                slots[f] = [*anc[j], fed + j]
            fed += len(frontier)
            v, i = self._children(h, top_k)
            cand = (torch.tensor([scores[f] for f in frontier])[:, None] + v).flatten()
            width = v.shape[1]
            first_new = len(tokens)
            for n, (s, t) in enumerate(zip(cand.tolist(), i.flatten().tolist())):
                j = n // width
                tokens.append(t)
                parents.append(frontier[j])
                scores.append(s)
                depths.append(depths[frontier[j]] + 1)
                feats.append(h[j])
            best = torch.topk(cand, min(top_k, cand.numel())).indices.tolist()
            frontier = sorted(first_new + b for b in best)
        # The tree's entries are speculative: back to the committed prefix (x_last included).
        crop_cache(c.cache, committed)
        del c._cache_index[committed:]
        # Rerank: best cumulative score first, shallower first on ties (keeps the set ancestor-closed).
        order = sorted(range(len(tokens)), key=lambda n: (-scores[n], depths[n], n))[:total]
        keep = sorted(order, key=lambda n: (depths[n], n))
        new_index = {n: j for j, n in enumerate(keep)}
        return DraftTree(
            tokens=tuple(tokens[n] for n in keep),
            parents=tuple(new_index[parents[n]] if parents[n] >= 0 else -1 for n in keep),
            scores=tuple(scores[n] for n in keep),
        )

    def commit(self, accepted: list[int], next_token: int) -> None:
        """The target kept ``accepted`` draft tokens (a path) and then emitted ``next_token``.

        Queues them with the target's penultimate states of the path's inputs (row 0 = ``x_last``),
        exactly as :meth:`SparrowDrafter.commit` queues an accepted chain.
        """
        rows = self._path_penult
        if rows is None:
            raise RuntimeError("TreeSparrowDrafter.commit needs the verify pass's penultimate states: decode with "
                               "TreeSparrowDecoder (or give TreeSpeculativeDecoder the verifier drafter.tap(v))")
        if rows.shape[0] < len(accepted) + 1:
            raise ValueError(f"{len(accepted)} accepted tokens but only {rows.shape[0]} target rows on the path")
        c = self.chain
        p = c._pending
        start = (p.index[-1] if p.tokens else c._cache_index[-1]) + 1
        for j, tok in enumerate([*accepted, next_token]):
            p.tokens.append(tok)
            p.hidden.append(rows[j])
            p.index.append(start + j)
        self._path_penult = None

    @property
    def cache_length(self) -> int:
        """Entries in the draft's KV cache (committed text positions only between rounds)."""
        return self.chain.cache_length


class TreeSparrowDecoder(TreeSpeculativeDecoder):
    """:class:`~vidspec.decoding.fast.TreeSpeculativeDecoder` driven by a :class:`TreeSparrowDrafter`.

    The verifier (default strict, lossless) is wrapped with :meth:`TreeSparrowDrafter.tap`, so the
    target returns its penultimate states and the drafter's commit receives those of the kept path.

    Args:
        target: the model whose output we want (eager adapter or FastTarget).
        drafter: the Sparrow tree drafter.
        verifier: a chain verifier applied along the best path.
        total_tokens, depth, top_k: tree shape (see TreeSpeculativeDecoder).
        method: label carried into results.
    """

    def __init__(self, target, drafter: TreeSparrowDrafter, verifier: Verifier | None = None, total_tokens: int = 30,
                 depth: int = 4, top_k: int = 8, method: str = "tree-sparrow"):
        super().__init__(target, drafter, drafter.tap(verifier or StrictVerifier()), total_tokens=total_tokens,
                         depth=depth, top_k=top_k, method=method)
