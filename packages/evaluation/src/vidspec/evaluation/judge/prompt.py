"""The judge prompt: our own wording of lmms-eval's 0-5 detail score for open-ended answers.

lmms-eval scores detailed captions (VideoDetailCaption, MovieChat-1K, the video detailed-description
set) by asking a GPT model for one integer from 0 to 5 that rates how completely and specifically a
predicted answer covers the reference. We ask the same question in our own words; the exact text is
pinned by a golden file (``golden_prompt.txt`` beside this module) so that scores stay comparable
across versions. Regenerate the golden file only on purpose::

    VIDSPEC_UPDATE_GOLDEN=1 pytest packages/evaluation/tests/test_judge.py -k golden

and say why in the commit: any change to this text changes every cached verdict's key.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

#: The golden rendering of :func:`build_messages` for :data:`GOLDEN_EXAMPLE`.
GOLDEN_PATH = Path(__file__).with_name("golden_prompt.txt")

SYSTEM_PROMPT = (
    "You grade answers that a video assistant gave to questions about a video. You do not see the "
    "video; a human-written reference answer stands in for it.\n"
    "Judge how well the assistant's answer covers the reference:\n"
    "- Completeness: does it mention every important subject, action, attribute and event of the "
    "reference?\n"
    "- Specificity: does it give concrete details rather than generic statements?\n"
    "- Correctness: details that contradict the reference count against the answer.\n"
    "- Paraphrases and synonyms of the reference count as matches; wording and order do not matter."
)

USER_TEMPLATE = (
    "Question: {question}\n"
    "Reference answer: {reference}\n"
    "Assistant's answer: {answer}\n\n"
    "Rate the assistant's answer with one integer from 0 (useless or wrong) to 5 (complete, "
    "specific and correct). Reply with a JSON object and nothing else, for example: "
    '{{"score": 3}}'
)

#: Inputs the golden file is rendered from.
GOLDEN_EXAMPLE = {
    "question": "Describe the video in detail.",
    "answer": "A red circle moves to the left, then a small blue square appears.",
    "reference": "A large red circle slides from right to left. Afterwards a small blue square fades in.",
}

#: Changes whenever the prompt text changes; part of every cache key, so a new prompt never reuses
#: verdicts given to the old one.
PROMPT_VERSION = hashlib.sha256((SYSTEM_PROMPT + "\0" + USER_TEMPLATE).encode()).hexdigest()[:12]


def build_messages(question: str, answer: str, reference: str) -> list[dict[str, str]]:
    """Chat-completions messages asking the judge to score ``answer`` against ``reference``.

    Args:
        question: the prompt the video model answered.
        answer: the video model's answer (the text being judged).
        reference: the benchmark's reference answer.

    Returns:
        ``[{"role": "system", ...}, {"role": "user", ...}]``.
    """
    user = USER_TEMPLATE.format(question=question.strip(), reference=reference.strip(), answer=answer.strip())
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def render_messages(messages: list[dict[str, str]]) -> str:
    """A stable plain-text form of ``messages``, the format of the golden file."""
    return "".join(f"### {m['role']}\n{m['content']}\n" for m in messages)


_SCORE_KEY = re.compile(r"""["']?score["']?\s*[:=]\s*["']?(-?\d+(?:\.\d+)?)""", re.IGNORECASE)
_BARE_NUMBER = re.compile(r"\s*(-?\d+(?:\.\d+)?)\s*\.?\s*")


def parse_score(reply: str) -> float | None:
    """The 0-5 score in a judge's reply, or ``None`` when the reply holds no valid score.

    Accepted forms, in order: a JSON object with a ``score`` key (possibly inside a code fence or
    with text around it), ``score: N`` anywhere in the text, or a reply that is only a number.
    Numbers outside 0-5 are invalid. ``None`` is never turned into 0: a reply the judge could not
    score is not a bad answer.

    Args:
        reply: the ``message.content`` of the judge's reply.

    Returns:
        The score as a float in [0, 5], or ``None``.
    """
    text = reply.strip()
    value: float | None = None
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        try:
            obj = json.loads(text[start : end + 1])
        except json.JSONDecodeError:
            obj = None
        score = obj.get("score") if isinstance(obj, dict) else None
        # bool is an int subclass: {"score": true} is not a score.
        if isinstance(score, int | float | str) and not isinstance(score, bool):
            try:
                value = float(score)
            except ValueError:
                value = None
    if value is None and (m := _SCORE_KEY.search(text)):
        value = float(m.group(1))
    if value is None and (m := _BARE_NUMBER.fullmatch(text)):
        value = float(m.group(1))
    if value is None or not 0.0 <= value <= 5.0:
        return None
    return value
