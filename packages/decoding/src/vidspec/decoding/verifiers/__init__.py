"""Verifiers: decide how many draft tokens a round keeps.

Strict verification (lossless) lives in :mod:`.strict`; the loose verifiers of LVSpec, PST and
FLy in their own modules. :func:`build_verifier` maps a ``--method`` name to a verifier.
"""

from vidspec.decoding.verifiers.strict import StrictVerifier

__all__ = ["StrictVerifier"]
