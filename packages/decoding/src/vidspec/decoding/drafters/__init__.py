"""Drafters: who proposes the tokens a round verifies.

- :mod:`.base`: :class:`NoDrafter` (autoregressive, K = 0) and :class:`DraftPrefillStart`.
- :mod:`.vlm`: :class:`ModelDrafter`, a smaller Video-LLM of the target's family.
- :mod:`.sparrow`: the Sparrow draft model (:class:`~.sparrow.SparrowDraftModel`, its release
  format) and its chain drafter (:class:`~.sparrow.SparrowDrafter`).
- :mod:`.sparrow_tree`: :class:`~.sparrow_tree.TreeSparrowDrafter`, the Sparrow draft growing trees.

These are the eager drafters; their static-cache, CUDA-graph versions are in
:mod:`vidspec.decoding.fast`. The three names below are importable from the package itself.
"""

from __future__ import annotations

from vidspec.decoding.drafters.base import DraftPrefillStart, NoDrafter
from vidspec.decoding.drafters.vlm import ModelDrafter

__all__ = ["DraftPrefillStart", "ModelDrafter", "NoDrafter"]
