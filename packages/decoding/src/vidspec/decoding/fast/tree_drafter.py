"""``TreeModelDrafter``: a draft VLM grows EAGLE-2 trees in :class:`FastTarget` tree sessions.

The draft model's tree levels run as tree-masked passes over its own static cache, which only the
fast backend provides; an eager draft adapter is wrapped in a FastTarget (plain PyTorch steps on
CPU), so the ``tree-sd`` method uses this drafter on either engine.
"""

from __future__ import annotations

import torch

from vidspec.decoding.drafters.base import DraftPrefillStart
from vidspec.decoding.fast.target import FastTarget
from vidspec.decoding.models.base import HFVideoTarget
from vidspec.decoding.trees import DraftTree, grow_tree
from vidspec.decoding.types import TargetState, VerifyOutput


class TreeModelDrafter(DraftPrefillStart):
    """A separate small VLM drafts an EAGLE-2 dynamic tree (greedy / top-k by draft probability).

    The draft model must support tree sessions (:class:`~vidspec.decoding.fast.FastTarget`, which
    runs eagerly on CPU); an eager adapter passed here is wrapped in one.

    Args:
        model: the draft model (same family and vocabulary as the target).
    """

    def __init__(self, model):
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
        states reads (:class:`~vidspec.decoding.drafters.sparrow_tree.TreeSparrowDrafter`).
        """
        self._seq.extend(accepted)
        self._seq.append(next_token)
