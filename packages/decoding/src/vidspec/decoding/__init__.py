"""vidspec.decoding: the speculative decoding engine for Video-LLMs (the bottom layer).

The public surface: contracts (:mod:`.types`), model loading (:func:`load_target`), drafters,
verifiers, the decoding loops (:class:`SpeculativeDecoder`, :class:`TreeSpeculativeDecoder`), the
method registry (:data:`METHODS`), the typed decode configuration (:class:`DecodeConfig`) and
:func:`build_decoder`, which assembles a method from them. Heavy imports (transformers, video
backends) happen lazily, so ``import vidspec.decoding`` stays cheap.

Layout: ``models/`` the eager Hugging Face adapters; ``fast/`` the static-cache, CUDA-graph backend
and its drafters; ``drafters/`` the eager drafters (draft VLM, Sparrow); ``loops/`` the chain and
tree decoding loops, shared by both backends; ``trees`` the draft-tree structures; ``verifiers/``
strict, LVSpec (+ PST), FLy and the relevance scorers; ``methods`` and ``config`` the registry and
the options; ``commands`` and ``cli`` the ``vidspec generate`` command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vidspec.decoding.types import (
    Decision,
    GenerationResult,
    Proposal,
    Request,
    StepRecord,
    TargetState,
    Timings,
    VerifyContext,
    VerifyOutput,
    VideoClip,
)

_LAZY = {
    "SpeculativeDecoder": "vidspec.decoding.loops.chain",
    "TreeSpeculativeDecoder": "vidspec.decoding.loops.tree",
    "DecodeConfig": "vidspec.decoding.config",
    "METHODS": "vidspec.decoding.methods",
    "load_target": "vidspec.decoding.models",
    "check_compatible": "vidspec.decoding.models",
    "ModelDrafter": "vidspec.decoding.drafters",
    "NoDrafter": "vidspec.decoding.drafters",
    "StrictVerifier": "vidspec.decoding.verifiers.strict",
    "build_decoder": "vidspec.decoding.methods",
    "read_video": "vidspec.decoding.video",
}

if TYPE_CHECKING:  # pragma: no cover
    from vidspec.decoding.config import DecodeConfig
    from vidspec.decoding.drafters import ModelDrafter, NoDrafter
    from vidspec.decoding.loops.chain import SpeculativeDecoder
    from vidspec.decoding.loops.tree import TreeSpeculativeDecoder
    from vidspec.decoding.methods import METHODS, build_decoder
    from vidspec.decoding.models import check_compatible, load_target
    from vidspec.decoding.verifiers.strict import StrictVerifier
    from vidspec.decoding.video import read_video


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'vidspec.decoding' has no attribute {name!r}")


__all__ = [
    "METHODS",
    "DecodeConfig",
    "Decision",
    "GenerationResult",
    "ModelDrafter",
    "NoDrafter",
    "Proposal",
    "Request",
    "SpeculativeDecoder",
    "StepRecord",
    "StrictVerifier",
    "TargetState",
    "TreeSpeculativeDecoder",
    "Timings",
    "VerifyContext",
    "VerifyOutput",
    "VideoClip",
    "build_decoder",
    "check_compatible",
    "load_target",
    "read_video",
]
