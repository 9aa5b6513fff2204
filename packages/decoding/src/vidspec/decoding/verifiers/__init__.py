"""Verifiers: decide how many draft tokens a round keeps.

Strict verification (lossless) lives in :mod:`.strict`; LVSpec (+PST, protected tokens) in
:mod:`.lvspec`, its relevance scorers in :mod:`.relevance`, FLy in :mod:`.fly`.
:func:`build_verifier` maps a method name and options to a verifier.
"""

from vidspec.decoding.verifiers.factory import RandomRelaxationVerifier, build_verifier
from vidspec.decoding.verifiers.fly import FLyConfig, FLyVerifier
from vidspec.decoding.verifiers.lvspec import LVSpecConfig, LVSpecVerifier, calibrate, protected_token_ids
from vidspec.decoding.verifiers.strict import StrictVerifier

__all__ = [
    "FLyConfig",
    "FLyVerifier",
    "LVSpecConfig",
    "LVSpecVerifier",
    "RandomRelaxationVerifier",
    "StrictVerifier",
    "build_verifier",
    "calibrate",
    "protected_token_ids",
]
