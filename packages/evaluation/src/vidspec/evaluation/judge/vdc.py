"""VDCscore: how well a detailed caption answers the questions a reference caption answers (the VDC benchmark).

VDC (AuroraCap's video detailed-captioning benchmark, lmms-eval's ``vdc`` tasks) gives each video a
reference caption and a list of question-answer pairs drawn from it. A predicted caption is scored
by question answering, not by comparing texts:

1. for every pair, the judge model answers the question from the predicted caption alone
   (protocol ``answer_from_caption``);
2. the judge compares that answer with the pair's answer (protocol ``correctness``: yes/no and 0-5).

The sample's score is the mean 0-5 score over its pairs and its accuracy the share of "yes". A pair
whose verdict cannot be read scores 0 and "no" (lmms-eval's rule for unreadable replies), so every
pair counts. Each request goes through :class:`~vidspec.evaluation.judge.client.GPTJudge`, with its
retries and its cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vidspec.evaluation.judge.protocols import CORRECTNESS


@dataclass(frozen=True)
class VDCScore:
    """The VDCscore of one caption.

    Attributes:
        score: mean 0-5 score over the question-answer pairs (0 for a sample without pairs).
        accuracy: share of pairs judged correct.
        n_pairs: pairs scored.
        unparsable: pairs whose verdict could not be read (scored 0, "no").
        model: the judge model.
        prompt_version: the correctness protocol's version (the answering protocol's is in each cache key).
    """

    score: float
    accuracy: float
    n_pairs: int
    unparsable: int
    model: str
    prompt_version: str


def vdc_score(judge: Any, caption: str, qa_pairs: Sequence[dict[str, str]]) -> VDCScore:
    """VDCscore of ``caption`` against the benchmark's ``qa_pairs`` (``{"question", "answer"}`` dicts)."""
    scores: list[float] = []
    correct: list[bool] = []
    bad = 0
    model = getattr(getattr(judge, "config", None), "model", "")
    for pair in qa_pairs:
        question, truth = str(pair["question"]), str(pair["answer"])
        answered = judge.judge(question, answer=caption, reference="", protocol="answer_from_caption")
        verdict = judge.judge(question, answer=answered.reply.strip(), reference=truth, protocol="correctness")
        bad += verdict.status != "ok"
        scores.append(float(verdict.score or 0.0))
        correct.append(bool(verdict.correct))
        model = verdict.model
    n = len(scores)
    return VDCScore(score=sum(scores) / n if n else 0.0, accuracy=sum(correct) / n if n else 0.0, n_pairs=n,
                    unparsable=bad, model=model, prompt_version=CORRECTNESS.version)
