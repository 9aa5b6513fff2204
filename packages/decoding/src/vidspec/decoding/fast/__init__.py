"""The fast decoder path: static KV cache, CUDA graphs, tree drafting, fused vision attention.

- :class:`FastTarget` implements the TargetModel protocol on the HF module's own weights
  (:class:`~vidspec.decoding.fast.lm.FastLM`); the eager adapters stay the reference.
- :class:`FastModelDrafter` / :class:`FastStrictVerifier`: greedy drafting and strict greedy
  verification with device-side token chaining and acceptance (one host sync per round; with
  ``SpeculativeDecoder(device_rounds=True)`` the draft tokens reach the verify step on the device).
- :class:`TreeSpeculativeDecoder` and :class:`TreeModelDrafter`: EAGLE-2-style dynamic trees.
- :class:`TreeSparrowDrafter`: the same trees grown by a Sparrow draft (eager), for :class:`TreeSpeculativeDecoder`.
- :class:`FastTreeSparrowDrafter`: those trees grown on the device (static shapes, one CUDA graph per round).
- :class:`FastSparrowDrafter`: a Sparrow draft on a static text-only cache, draft steps as CUDA graphs.
- :class:`FastQwenVision`: Qwen2.5-VL's vision tower with all attention windows in a few SDPA calls.

Names are imported lazily, so ``import vidspec.decoding.fast`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

_LAZY = {
    "FastLM": "vidspec.decoding.fast.lm",
    "StaticKVCache": "vidspec.decoding.fast.lm",
    "FastTarget": "vidspec.decoding.fast.target",
    "FastModelDrafter": "vidspec.decoding.fast.target",
    "FastStrictVerifier": "vidspec.decoding.fast.target",
    "FastVerifyOutput": "vidspec.decoding.fast.target",
    "DraftTree": "vidspec.decoding.fast.tree",
    "DeviceTree": "vidspec.decoding.fast.tree",
    "TreeModelDrafter": "vidspec.decoding.fast.tree",
    "TreeSpeculativeDecoder": "vidspec.decoding.fast.tree",
    "tree_mask_and_depth": "vidspec.decoding.fast.tree",
    "TreeSparrowDrafter": "vidspec.decoding.fast.tree_sparrow",
    "FastQwenVision": "vidspec.decoding.fast.vision",
    "FastSparrowDrafter": "vidspec.decoding.fast.sparrow",
    "FastTreeSparrowDrafter": "vidspec.decoding.fast.tree_sparrow_fast",
    "rerank_tree": "vidspec.decoding.fast.tree",
    "rerank_device": "vidspec.decoding.fast.tree",
}

if TYPE_CHECKING:  # pragma: no cover
    from vidspec.decoding.fast.lm import FastLM, StaticKVCache
    from vidspec.decoding.fast.sparrow import FastSparrowDrafter
    from vidspec.decoding.fast.target import (
        FastModelDrafter,
        FastStrictVerifier,
        FastTarget,
        FastVerifyOutput,
    )
    from vidspec.decoding.fast.tree import (
        DeviceTree,
        DraftTree,
        TreeModelDrafter,
        TreeSpeculativeDecoder,
        rerank_device,
        rerank_tree,
        tree_mask_and_depth,
    )
    from vidspec.decoding.fast.tree_sparrow import TreeSparrowDrafter
    from vidspec.decoding.fast.tree_sparrow_fast import FastTreeSparrowDrafter
    from vidspec.decoding.fast.vision import FastQwenVision


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'vidspec.decoding.fast' has no attribute {name!r}")


__all__ = [
    "DeviceTree",
    "DraftTree",
    "FastLM",
    "FastModelDrafter",
    "FastQwenVision",
    "FastSparrowDrafter",
    "FastStrictVerifier",
    "FastTarget",
    "FastTreeSparrowDrafter",
    "FastVerifyOutput",
    "StaticKVCache",
    "TreeModelDrafter",
    "TreeSparrowDrafter",
    "TreeSpeculativeDecoder",
    "rerank_device",
    "rerank_tree",
    "tree_mask_and_depth",
]
