"""The lmms-eval model's record and stop-string helpers (no lmms-eval needed)."""

from __future__ import annotations

from vidspec.decoding.types import GenerationResult, StepRecord, Timings
from vidspec.evaluation.lmms.records import request_record, truncate_at_stops


def test_truncate_at_stops_cuts_at_the_earliest_stop():
    assert truncate_at_stops("A. yes\n\nmore", ["\n\n", "more"]) == "A. yes"
    assert truncate_at_stops("B", None) == "B"
    assert truncate_at_stops("B</s>", "</s>") == "B"
    assert truncate_at_stops("B", ["", "x"]) == "B"


def _result(tokens: tuple[int, ...]) -> GenerationResult:
    step = StepRecord(drafted=3, accepted=2, emitted=3)
    return GenerationResult(method="sd", text="A", token_ids=tokens, steps=(step,),
                            timings=Timings(prefill_s=0.1, decode_s=0.2), finish_reason="eos")


def test_request_record_carries_tau_timings_and_identity_with_ar():
    rec = request_record(task="videomme", split="test", doc_id=4, method="sd", k=3, target="t",
                         result=_result((1, 2, 3, 4)), text="A", video_s=0.05, wall_s=0.4,
                         ar=dict(token_ids=(1, 2, 3, 4), wall_s=0.8))
    assert rec["sample_id"] == "videomme/test/4"
    assert rec["tau"] == 3.0 and rec["drafted"] == 3 and rec["accepted"] == 2
    assert rec["token_identical_to_ar"] is True and rec["esr"] == 2.0
    plain = request_record(task="videomme", split="test", doc_id=4, method="sd", k=3, target="t",
                           result=_result((1, 2)), text="A", video_s=0.05, wall_s=0.4)
    assert "token_identical_to_ar" not in plain
