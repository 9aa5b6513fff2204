"""Pay a decoder's one-time costs before its first request: compilation, CUDA graph capture, lazy set-up.

A loaded decoder still has work to do the first time it decodes: on the fast engine ``torch.compile``
builds the step pieces (one variant per step length) and the vision tower's blocks, and every CUDA
graph (one per step length and cache bucket) is captured when a decode first needs it; on either
engine the CUDA libraries pick kernels and the allocator grows. Left to the first request, all of
it lands in that request's prefill and decode times. :func:`warm_up` does it up front:

1. one short decode of a synthetic request (a small moving-square clip at the target's frame count,
   a short prompt), with the adaptive policy off so every draft length runs: compiles what a request
   needs and sets up the drafters;
2. on the fast engine on CUDA, the graphs of every step length a round can use, over every cache
   bucket up to ``max_context`` positions (the target's verify steps T = 1..K+1, a draft VLM's
   pending lengths, a Sparrow draft's steps). A request that reaches past ``max_context`` captures
   the remaining buckets as it goes.

Usage (keep one decoder warm and serve many requests with it)::

    decoder = build_decoder("sd", target="Qwen/Qwen2.5-VL-7B-Instruct", draft=..., device="cuda")
    decoder.warmup()                      # seconds, once per process
    for req in requests:
        result = decoder.generate(req, max_new_tokens=256)
"""

from __future__ import annotations

import time
from typing import Any

from vidspec.decoding.types import Request, VideoClip

#: Cache positions whose graphs :func:`warm_up` captures by default (prompt + generated tokens).
DEFAULT_WARM_CONTEXT = 4096


def synthetic_request(target: Any, size: tuple[int, int] = (224, 224)) -> Request:
    """A short request with a synthetic clip of the target's frame count (``max_frames``, else 8)."""
    from vidspec.decoding.fixtures import make_moving_square_frames

    adapter = getattr(target, "adapter", target)
    frames = int(getattr(adapter, "max_frames", 8) or 8)
    clip = VideoClip(frames=make_moving_square_frames(frames, size[0], size[1]), fps=2.0, source="warm-up")
    return Request(prompt="Describe the video.", clip=clip)


def _is_fast(model: Any) -> bool:
    """A fast-engine target (its static-cache LM and graph warm-up), told by what it has: the loops sit below
    the fast backend and do not import it."""
    return callable(getattr(model, "warmup_contexts", None)) and getattr(model, "lm", None) is not None


def capture_graphs(decoder: Any, max_context: int, min_context: int = 0) -> int:
    """Capture the CUDA graphs a chain decoder's rounds can use between ``min_context`` and ``max_context``
    cache positions.

    Returns:
        Graphs captured (0 on the eager engine, off CUDA, or when all exist already).
    """
    k = int(getattr(decoder, "k", 0))
    lengths = tuple(range(1, k + 2))
    captured = 0
    # A draft VLM's prompt can be shorter than the target's (pruned frames): its buckets start at 0.
    for model, low in ((decoder.target, min_context), (getattr(decoder.drafter, "model", None), 0)):
        if model is None or not _is_fast(model) or not model.graphs:
            continue
        top = min(max_context, model.lm.max_len - 1)
        captured += model.warmup(lengths, model.warmup_contexts(min(low, top), top))
    if _is_fast(decoder.target) and k > 0:
        drafter = decoder.drafter
        if callable(getattr(drafter, "warmup_buckets", None)):  # a fast Sparrow chain drafter
            # The draft's cache holds the text positions only: the prompt's text and the generated tokens.
            captured += drafter.warmup(decoder.target, k, max_text=min(max_context, 1024))
    return captured


def warm_up(decoder: Any, *, request: Request | None = None, max_context: int | None = None,
            min_context: int = 0, max_new_tokens: int | None = None) -> dict[str, float | int]:
    """Run ``decoder``'s one-time work now (see the module docstring); it then serves requests warm.

    Args:
        decoder: a :class:`~vidspec.decoding.loops.SpeculativeDecoder` or
            :class:`~vidspec.decoding.loops.TreeSpeculativeDecoder`.
        request: the request to decode once (default: :func:`synthetic_request`).
        max_context: cache positions whose graphs are captured (default :data:`DEFAULT_WARM_CONTEXT`).
        min_context: the first of them (a caller that knows its prompts' length skips the shorter buckets).
        max_new_tokens: tokens of the warm-up decode (default: two full rounds).

    Returns:
        ``{"warmup_s": seconds, "graphs": graphs captured}``.
    """
    from vidspec.decoding.loops.chain import _sync

    t0 = time.perf_counter()
    req = request or synthetic_request(decoder.target)
    k = int(getattr(decoder, "k", 0) or getattr(decoder, "depth", 0))
    n = max_new_tokens or 2 * (k + 1) + 2
    policy = getattr(decoder, "adaptive", None)
    if policy is not None:
        decoder.adaptive = None  # every draft length runs once
    try:
        decoder.generate(req, max_new_tokens=n)
    finally:
        if policy is not None:
            decoder.adaptive = policy
    graphs = 0
    from vidspec.decoding.loops.tree import TreeSpeculativeDecoder

    if not isinstance(decoder, TreeSpeculativeDecoder):
        graphs = capture_graphs(decoder, max_context or DEFAULT_WARM_CONTEXT, min_context)
    _sync(decoder.target.device)
    return {"warmup_s": time.perf_counter() - t0, "graphs": graphs}
