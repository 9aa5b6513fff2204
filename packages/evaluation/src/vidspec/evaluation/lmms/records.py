"""The per-request vidspec record the lmms-eval model writes, and lmms-eval's stop strings applied to a text.

Kept apart from :mod:`~vidspec.evaluation.lmms.model` so that they import without lmms-eval.
"""

from __future__ import annotations

from typing import Any

from vidspec.decoding.types import GenerationResult


def truncate_at_stops(text: str, until: list[str] | str | None) -> str:
    """``text`` cut before the first of the stop strings lmms-eval's ``until`` names (none: unchanged)."""
    if isinstance(until, str):
        until = [until]
    cut = len(text)
    for stop in until or ():
        if stop:
            at = text.find(stop)
            if at >= 0:
                cut = min(cut, at)
    return text[:cut]


def request_record(*, task: str, split: str, doc_id: int, method: str, k: int, target: str,
                   result: GenerationResult, text: str, video_s: float, wall_s: float,
                   ar: dict[str, Any] | None = None) -> dict[str, Any]:
    """The vidspec record of one lmms-eval request (one JSON line).

    ``ar``: the same request decoded by AR (``token_ids`` and ``wall_s``), when ``compare_ar`` is on.
    """
    steps = result.steps
    rec: dict[str, Any] = dict(
        source="lmms-eval", task=task, split=split, doc_id=doc_id, sample_id=f"{task}/{split}/{doc_id}",
        method=method, k=k, target=target, text=text, raw_text=result.text, token_ids=list(result.token_ids),
        num_new_tokens=result.num_new_tokens, finish_reason=result.finish_reason, tau=result.tau,
        target_passes=result.target_passes, drafted=sum(s.drafted for s in steps),
        accepted=sum(s.accepted for s in steps), loose_accepted=result.loose_accepted,
        video_s=video_s, prefill_s=result.timings.prefill_s, decode_s=result.timings.decode_s, wall_s=wall_s,
    )
    if ar is not None:
        rec.update(token_identical_to_ar=list(result.token_ids) == list(ar["token_ids"]),
                   ar_wall_s=ar["wall_s"], esr=ar["wall_s"] / wall_s if wall_s > 0 else None)
    return rec
