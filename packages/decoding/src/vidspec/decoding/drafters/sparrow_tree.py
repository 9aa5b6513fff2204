"""Tree drafting with a Sparrow draft: an EAGLE-2 dynamic tree grown by the one-layer text-only draft.

Usage::

    from vidspec.decoding.drafters.sparrow_tree import TreeSparrowDrafter
    from vidspec.decoding.loops.tree import TreeSpeculativeDecoder
    target = load_target("data/releases/synthvid-target")
    drafter = TreeSparrowDrafter.from_pretrained("data/releases/sparrow-synthvid", target)
    dec = TreeSpeculativeDecoder(target, drafter, total_tokens=48, depth=8, top_k=8, method="tree-sparrow")
    result = dec.generate(Request("Describe the video.", clip), max_new_tokens=64)

From the CLI and ``build_decoder`` this is method ``tree-sparrow`` (``tree-sd`` grows the tree with
:class:`~vidspec.decoding.fast.TreeModelDrafter`); see :mod:`vidspec.decoding.methods`.

**The tree** is grown as :class:`~vidspec.decoding.fast.TreeModelDrafter` grows it (EAGLE-2: a
frontier of ``top_k`` nodes, each proposing its ``top_k`` most likely children, the ``top_k``
children of best cumulative draft log-probability forming the next frontier; at the end the best
``total`` nodes are kept, shallower first on ties). What differs is the draft step:

- **Inputs.** A node ``x`` at depth ``d`` enters the draft as ``z = FC([e_x ; ĥ_parent])``, where
  ``ĥ_parent`` is the draft's own output at the node's parent (at depth 1, its output at the root
  ``x_last``, which was fed with the target's state). This is what the chain
  :class:`~vidspec.decoding.drafters.sparrow.SparrowDrafter` does for draft steps after the first; with
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

The tree decoder (:class:`~vidspec.decoding.loops.TreeSpeculativeDecoder`) asks the target for what
the drafter ``need`` s (``penult``) and hands ``commit`` the target's rows of the kept path.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from vidspec.decoding.drafters.sparrow import SparrowDrafter, SparrowDraftModel
from vidspec.decoding.models.base import crop_cache
from vidspec.decoding.trees import DraftTree, grow_tree
from vidspec.decoding.types import (
    TargetModel,
    TargetState,
    VerifyOutput,
)


class TreeSparrowDrafter:
    """A Sparrow draft grows an EAGLE-2 dynamic tree (eager PyTorch, CPU or CUDA; greedy).

    Per-step inputs, positions, the text-only cache and the draft vocabulary are those of a
    :class:`~vidspec.decoding.drafters.sparrow.SparrowDrafter` held inside (``chain``); this class adds the
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

    @classmethod
    def from_pretrained(cls, path: str | Path, target: TargetModel | None = None, *,
                        allow_target_mismatch: bool = False, draft_vocab: int | None = None) -> TreeSparrowDrafter:
        """Load a Sparrow release (``draft_vocab``: its most frequent tokens as the draft vocabulary)."""
        chain = SparrowDrafter.from_pretrained(path, target, allow_target_mismatch=allow_target_mismatch,
                                               draft_vocab=draft_vocab)
        d = cls(chain.model, allow_target_mismatch=allow_target_mismatch, head_ids=chain.head_ids)
        d.chain._checked = chain._checked
        return d

    def prepare(self, target: TargetModel, state: TargetState) -> None:
        """The prompt feed (:meth:`SparrowDrafter.prepare`), before the first token is known."""
        if state.prompt_hidden_penult is None:
            raise RuntimeError("TreeSparrowDrafter needs the target's penultimate states: prefill with "
                               "need={'penult'} (TreeSpeculativeDecoder asks for the drafter's need)")
        self.chain.prepare(target, state)

    def begin(self, target: TargetModel, state: TargetState, first_token: int) -> None:
        if self.chain._prepared is not state:
            self.prepare(target, state)
        self.chain.begin(target, state, first_token)

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
        slots: dict[int, list[int]] = {}  # fed node -> cache slots (after the prefix) of it and its ancestors
        outs: dict[int, torch.Tensor] = {}  # fed node -> its ĥ, the feature input of its children
        fed = [0]

        def level(frontier, tokens, parents, depths):
            anc = [slots[parents[f]] if parents[f] >= 0 else [] for f in frontier]
            feats = [outs[parents[f]] if parents[f] >= 0 else h_root for f in frontier]
            h = self._feed_level([tokens[f] for f in frontier], feats, [root_index + depths[f] for f in frontier],
                                 anc, committed)
            for j, f in enumerate(frontier):
                slots[f] = [*anc[j], fed[0] + j]
                outs[f] = h[j]
            fed[0] += len(frontier)
            return self._children(h, top_k)

        v, i = self._children(h_root[None], top_k)
        tree = grow_tree((v[0], i[0]), level, depth, top_k, total)
        # The tree's entries are speculative: back to the committed prefix (x_last included).
        crop_cache(c.cache, committed)
        del c._cache_index[committed:]
        return tree

    def commit(self, accepted: list[int], next_token: int, out: VerifyOutput | None = None) -> None:
        """The target kept ``accepted`` draft tokens (a path) and then emitted ``next_token``.

        Queues them with the target's penultimate states of the path's inputs (``out``, the target's
        rows of the path, row 0 = ``x_last``), exactly as :meth:`SparrowDrafter.commit` queues an
        accepted chain.
        """
        rows = None if out is None else out.hidden_penult
        if rows is None:
            raise RuntimeError("TreeSparrowDrafter.commit needs the target's penultimate states of the path "
                               "(TreeSpeculativeDecoder passes them)")
        if rows.shape[0] < len(accepted) + 1:
            raise ValueError(f"{len(accepted)} accepted tokens but only {rows.shape[0]} target rows on the path")
        c = self.chain
        p = c._pending
        start = (p.index[-1] if p.tokens else c._cache_index[-1]) + 1
        for j, tok in enumerate([*accepted, next_token]):
            p.tokens.append(tok)
            p.hidden.append(rows[j])
            p.index.append(start + j)

    @property
    def cache_length(self) -> int:
        """Entries in the draft's KV cache (committed text positions only between rounds)."""
        return self.chain.cache_length
