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

import json
import logging
import time
from typing import Any

from vidspec.decoding.types import Request, VideoClip

log = logging.getLogger(__name__)

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


def tree_verify_sizes(total_tokens: int, depth: int, top_k: int) -> tuple[int, ...]:
    """Node counts a tree decoder's verify pass can have (``x_last`` + the kept draft nodes).

    A round drafts ``min(depth, tokens left - 1)`` levels: level 1 has ``top_k`` nodes and each
    further level ``top_k * top_k`` (every frontier node's children), of which ``total_tokens``
    are kept; a round with no level left verifies ``x_last`` alone.
    """
    sizes = {1}
    for d in range(1, depth + 1):
        sizes.add(min(total_tokens, top_k + (d - 1) * top_k * top_k) + 1)
    return tuple(sorted(sizes))


def capture_graphs_around(decoder: Any, max_new_tokens: int) -> int:
    """Capture every CUDA graph a decoder's requests can need around the cache lengths its last decode reached.

    For a caller whose requests are alike (an evaluation's samples: prompts of about one length), after one
    decode of such a request: per fast model, from a bucket below where that decode left its cache up to
    ``max_new_tokens`` (plus a round) beyond it. A chain decoder: the target's verify steps (T = 1 for AR,
    k + 1 for k = 0..K: a round drafts fewer than K near the budget), a draft VLM's pending lengths 1..K+1 and
    a fast Sparrow draft's steps. A tree decoder (:class:`~vidspec.decoding.loops.TreeSpeculativeDecoder`)
    instead: the target's verify-tree sizes (:func:`tree_verify_sizes`), a draft VLM's pending lengths
    1..depth+1 and its level passes of ``top_k`` nodes, or a fast tree Sparrow draft's round graphs. Off CUDA
    and on the eager engine nothing is captured.

    Returns:
        The number of graphs captured.
    """
    from vidspec.decoding.loops.tree import TreeSpeculativeDecoder

    k = int(decoder.k)
    lengths = tuple(range(1, k + 2))
    tree = isinstance(decoder, TreeSpeculativeDecoder)
    draft_model = getattr(decoder.drafter, "model", None)
    plan = [(decoder.target, lengths, k + 1), (draft_model, lengths, k + 1)]
    if tree and _is_fast(decoder.target):
        sizes = tree_verify_sizes(decoder.total_tokens, decoder.depth, decoder.top_k)
        # The draft's tree session reaches (depth - 1) * top_k nodes past its committed prefix.
        plan = [(decoder.target, sizes, max(sizes)),
                (draft_model, tuple(sorted({*lengths, decoder.top_k})), k + 1 + (k - 1) * decoder.top_k)]
    captured = 0
    for model, steps, span in plan:
        if model is None or not _is_fast(model) or not model.graphs:
            continue
        cache = model.lm.cache
        end = cache.length if cache is not None else 0  # the last request's prompt + tokens
        # One bucket below it too: another request's prompt may be a little shorter.
        contexts = model.warmup_contexts(max(0, end - model.lm.bucket), end + max_new_tokens + span)
        captured += model.warmup(steps, contexts)
    drafter = decoder.drafter
    if _is_fast(decoder.target) and k > 0 and callable(getattr(drafter, "warmup", None)) \
            and hasattr(drafter, "cache_length"):
        if tree:  # a fast tree Sparrow draft: its round graphs per (pending T, depth, bucket)
            captured += drafter.warmup(decoder.target, decoder.depth, decoder.top_k,
                                       max_text=drafter.cache_length + max_new_tokens + decoder.depth + 1,
                                       total=decoder.total_tokens if decoder.device_rounds else None)
        elif callable(getattr(drafter, "warmup_buckets", None)):  # a fast Sparrow chain draft
            # The draft's cache holds text positions only: the last request's, plus the budget.
            captured += drafter.warmup(decoder.target, k, max_text=drafter.cache_length + max_new_tokens + k + 1)
    if captured:
        log.info("captured %d CUDA graphs for %s", captured, getattr(decoder, "method", "the decoder"))
    return captured


def compile_stats() -> dict[str, float]:
    """A snapshot of torch.compile's process-wide accounting: seconds per compile phase and cache counters.

    The keys are torch's own (``compile_inner``: Dynamo's whole compile of a frame, backend included;
    ``bytecode_tracing``: Dynamo's tracing; ``call_user_compiler``: the backend; ``fxgraph_cache_hit`` and
    the like: cache counters). Differences of two snapshots (:func:`stats_delta`) say what a span of work
    paid. Empty when torch does not expose them.
    """
    out: dict[str, float] = {}
    try:
        from torch._dynamo.utils import compilation_time_metrics, counters
    except ImportError:  # pragma: no cover - a torch build without Dynamo
        return out
    for name, times in list(compilation_time_metrics.items()):
        short = name.split(".")[-1] if name.startswith(("_compile.", "OutputGraph.")) else name
        out[f"s:{short}"] = out.get(f"s:{short}", 0.0) + float(sum(times))
    for group in ("stats", "inductor", "aot_autograd", "dynamo_cache"):
        for name, n in list(counters.get(group, {}).items()):
            if name in ("unique_graphs", "calls_captured") or "cache" in name:
                out[f"n:{name}"] = float(n)
    return out


#: The compile phases :func:`stats_delta` reports (torch's names, shortened), the rest summed as ``other``.
PHASES = ("compile_inner", "bytecode_tracing", "call_user_compiler", "create_aot_dispatcher_function",
          "fx_codegen_and_compile", "PyCodeCache.load_by_key_path", "async_compile.wait", "build_guards")


def stats_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float | int]:
    """What happened between two :func:`compile_stats` snapshots: the :data:`PHASES` seconds (rounded) and the
    counters that moved."""
    out: dict[str, float | int] = {}
    for phase in PHASES:
        d = after.get(f"s:{phase}", 0.0) - before.get(f"s:{phase}", 0.0)
        if d > 0:
            out[f"{phase}_s"] = round(d, 3)
    for key, value in after.items():
        if key.startswith("n:") and value != before.get(key, 0.0):
            out[key[2:]] = int(value - before.get(key, 0.0))
    return out


def warm_up(decoder: Any, *, request: Request | None = None, max_context: int | None = None,
            min_context: int = 0, max_new_tokens: int | None = None,
            request_tokens: int | None = None) -> dict[str, Any]:
    """Run ``decoder``'s one-time work now (see the module docstring); it then serves requests warm.

    Args:
        decoder: a :class:`~vidspec.decoding.loops.SpeculativeDecoder` or
            :class:`~vidspec.decoding.loops.TreeSpeculativeDecoder`.
        request: the request to decode once (default: :func:`synthetic_request`).
        max_context: cache positions whose graphs are captured (default :data:`DEFAULT_WARM_CONTEXT`).
        min_context: the first of them (a caller that knows its prompts' length skips the shorter buckets).
        max_new_tokens: tokens of the warm-up decode (default: two full rounds).
        request_tokens: for requests like ``request`` (an evaluation's samples): the most tokens one generates;
            the graphs are then those around where the warm-up decode left each model's cache
            (:func:`capture_graphs_around`, tree decoders included) instead of ``min_context``..``max_context``.

    Returns:
        ``{"warmup_s": seconds, "graphs": graphs captured, "detail": {...}}``; ``detail`` splits the seconds
        into the warm-up decode (``decode_s``), the graph captures after it (``graphs_s``) and the saving of
        compile artifacts (``artifacts_s``, only with ``$VIDSPEC_COMPILE_ARTIFACTS``), and gives what torch's
        compiler paid within them (:func:`stats_delta`). It is also logged (INFO, this module's logger).
    """
    from vidspec.decoding.loops.chain import _sync

    t0 = time.perf_counter()
    stats0 = compile_stats()
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
    _sync(decoder.target.device)
    t1 = time.perf_counter()
    graphs = 0
    from vidspec.decoding.loops.tree import TreeSpeculativeDecoder

    if request_tokens is not None:
        graphs = capture_graphs_around(decoder, request_tokens)
    elif not isinstance(decoder, TreeSpeculativeDecoder):
        graphs = capture_graphs(decoder, max_context or DEFAULT_WARM_CONTEXT, min_context)
    _sync(decoder.target.device)
    t2 = time.perf_counter()
    detail: dict[str, Any] = {"decode_s": round(t1 - t0, 3), "graphs_s": round(t2 - t1, 3)}
    save_artifacts = getattr(decoder.target, "save_compile_artifacts", None) if _is_fast(decoder.target) else None
    if save_artifacts is not None and save_artifacts():  # the fast backend's opt-in compile artifacts
        detail["artifacts_s"] = round(time.perf_counter() - t2, 3)
    detail["compile"] = stats_delta(stats0, compile_stats())
    total = time.perf_counter() - t0
    log.info("warm-up %.2f s: %s", total, json.dumps(detail))
    return {"warmup_s": total, "graphs": graphs, "detail": detail}
