"""The fast backend: static KV cache, CUDA graphs, fused kernels (the eager adapters stay the reference).

- :class:`FastTarget` implements the TargetModel protocol on the HF module's own weights
  (:class:`~vidspec.decoding.fast.lm.FastLM`), chain and tree verification included.
- :class:`FastModelDrafter` / :class:`FastStrictVerifier`: greedy drafting and strict greedy
  verification with device-side token chaining and acceptance (one host sync per round; with
  ``SpeculativeDecoder(device_rounds=True)`` the draft tokens reach the verify step on the device).
- :class:`TreeModelDrafter`: a draft VLM grows EAGLE-2 trees in FastTarget tree sessions.
- :class:`FastSparrowDrafter`: a Sparrow draft on a static text-only cache, draft steps as CUDA graphs.
- :class:`FastTreeSparrowDrafter`: Sparrow trees grown on the device (static shapes, one CUDA graph per round).
- :class:`FastQwenVision`: Qwen2.5-VL's vision tower with all attention windows in a few SDPA calls.
- :mod:`.kernels` and :mod:`.gemv`: the Triton kernels the steps use on CUDA.

The decoding loops that drive these are in :mod:`vidspec.decoding.loops` (the same for both
backends); the draft-tree structures in :mod:`vidspec.decoding.trees`. Names are imported lazily,
so ``import vidspec.decoding.fast`` stays cheap.
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
    "TreeModelDrafter": "vidspec.decoding.fast.tree_drafter",
    "FastQwenVision": "vidspec.decoding.fast.vision",
    "FastSparrowDrafter": "vidspec.decoding.fast.sparrow_drafter",
    "FastTreeSparrowDrafter": "vidspec.decoding.fast.sparrow_tree_drafter",
}

if TYPE_CHECKING:  # pragma: no cover
    from vidspec.decoding.fast.lm import FastLM, StaticKVCache
    from vidspec.decoding.fast.sparrow_drafter import FastSparrowDrafter
    from vidspec.decoding.fast.sparrow_tree_drafter import FastTreeSparrowDrafter
    from vidspec.decoding.fast.target import (
        FastModelDrafter,
        FastStrictVerifier,
        FastTarget,
        FastVerifyOutput,
    )
    from vidspec.decoding.fast.tree_drafter import TreeModelDrafter
    from vidspec.decoding.fast.vision import FastQwenVision


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'vidspec.decoding.fast' has no attribute {name!r}")


__all__ = [
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
]
