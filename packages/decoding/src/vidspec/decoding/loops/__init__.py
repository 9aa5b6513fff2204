"""Decoding loops, independent of the backend (eager adapters or the fast engine's FastTarget).

- :mod:`.chain`: :class:`SpeculativeDecoder`, K draft tokens per round (K = 0: autoregressive).
- :mod:`.tree`: :class:`TreeSpeculativeDecoder`, a dynamic draft tree per round.
"""

from __future__ import annotations

from vidspec.decoding.loops.chain import SpeculativeDecoder
from vidspec.decoding.loops.tree import TreeSpeculativeDecoder

__all__ = ["SpeculativeDecoder", "TreeSpeculativeDecoder"]
