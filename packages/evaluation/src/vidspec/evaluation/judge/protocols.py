"""Judge protocols: what the judge is asked about an open-ended answer and how its reply is read.

lmms-eval judges open-ended video answers in two ways, and vidspec asks the same questions in its
own words, with the same reply format and the same reading of the reply:

- ``detail`` (VideoDetailCaption, the video detailed-description set ``video_dc499``): *detail
  orientation*, one integer 0-5 for how completely and specifically the prediction covers the
  reference. Reply: a Python dict string ``{'score': 4}``.
- ``correctness`` (MovieChat-1K, global and breakpoint): does the prediction answer the question as
  the reference does (``'yes'``/``'no'``), plus a 0-5 match score. Reply: ``{'pred': 'yes', 'score': 4}``.

Reading the reply as lmms-eval reads it: the reply is evaluated as a Python literal; a fractional
score is cut to its integer part; a reply that cannot be read scores 0 (and ``correct`` is False).
Such verdicts keep ``status == "unparsable"``, so a report can say how many there were, but their
score counts, which is what makes the averages comparable with lmms-eval's.

``answer_from_caption`` is the first step of VDCscore (:mod:`vidspec.evaluation.judge.vdc`): the judge
model answers a question from the predicted caption alone; ``correctness`` then compares that answer
with the benchmark's.

``score`` is vidspec's earlier judgement (:mod:`vidspec.evaluation.judge.prompt`, JSON reply, an
unreadable reply left unscored); it stays the default for callers that name no protocol.

Every protocol has a :attr:`JudgeProtocol.version` (a hash of its text) that goes into each verdict
and its cache key, with the judge model: records from different prompts or models never mix.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

from vidspec.evaluation.judge import prompt as score_prompt


@dataclass(frozen=True)
class Reading:
    """What a judge reply says.

    Attributes:
        score: the 0-5 score (0 for an unreadable reply under lmms-eval's rule; None under ``score``).
        correct: the yes/no judgement of the ``correctness`` protocol (None for the others).
        parsed: whether the reply was readable.
    """

    score: float | None
    correct: bool | None = None
    parsed: bool = True


@dataclass(frozen=True)
class JudgeProtocol:
    """One way of judging: the messages sent and the reading of the reply.

    Attributes:
        name: ``detail``, ``correctness`` or ``score``.
        system: the system message.
        user_template: the user message; fields ``{question}``, ``{reference}``, ``{answer}``.
        max_tokens: the reply length limit sent with each request.
        lmms_task: the lmms-eval tasks whose judgement this mirrors ("" for vidspec's own).
        read: reply text -> :class:`Reading`.
        fixed_version: a version kept from before protocols existed ("" : hash the text).
    """

    name: str
    system: str
    user_template: str
    max_tokens: int
    lmms_task: str
    read: Callable[[str], Reading] = field(compare=False, repr=False)
    fixed_version: str = ""

    @property
    def version(self) -> str:
        """A short hash of the protocol's text: part of every verdict and cache key.

        ``score`` keeps the version its prompt always had (``fixed_version``), so earlier caches stay valid.
        """
        if self.fixed_version:
            return self.fixed_version
        text = f"{self.name}\0{self.system}\0{self.user_template}"
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def messages(self, question: str, answer: str, reference: str) -> list[dict[str, str]]:
        """The chat-completions messages that ask for one verdict."""
        user = self.user_template.format(question=question.strip(), reference=reference.strip(),
                                         answer=answer.strip())
        return [{"role": "system", "content": self.system}, {"role": "user", "content": user}]


def _literal(reply: str) -> dict | None:
    """The reply as a Python dict literal (a code fence around it is allowed), or None."""
    text = reply.strip()
    if text.startswith("```"):
        text = text.strip("`")
        text = text.split("\n", 1)[1] if "\n" in text else text
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _int_score(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(int(float(value)))  # lmms-eval keeps the integer part of 4.8
    except (TypeError, ValueError, OverflowError):
        return None


def read_detail(reply: str) -> Reading:
    """``{'score': N}`` -> N (integer part); anything else scores 0."""
    obj = _literal(reply)
    score = _int_score(obj.get("score", 0)) if obj is not None else None
    return Reading(score=score, parsed=True) if score is not None else Reading(score=0.0, parsed=False)


def read_correctness(reply: str) -> Reading:
    """``{'pred': 'yes'|'no', 'score': N}`` -> (N, pred == 'yes'); an unreadable reply is (0, no)."""
    obj = _literal(reply)
    if obj is None:
        return Reading(score=0.0, correct=False, parsed=False)
    score = _int_score(obj.get("score", 0))
    pred = str(obj.get("pred", "no")).strip().lower()
    return Reading(score=score if score is not None else 0.0, correct=pred == "yes", parsed=score is not None)


def read_score(reply: str) -> Reading:
    """vidspec's ``score`` reading: a 0-5 score or, unreadable, no score at all."""
    score = score_prompt.parse_score(reply)
    return Reading(score=score, parsed=score is not None)


_DICT_ONLY = ("Reply with that Python dictionary literal alone, with no other words, for example "
              "{example}.")

DETAIL = JudgeProtocol(
    name="detail",
    system=(
        "You rate how detailed an answer about a video is. You do not see the video: a reference answer "
        "written by a person stands in for it.\n"
        "- Coverage: the answer should include every main point of the reference and leave out none of "
        "its key aspects.\n"
        "- Specificity: concrete details tied to what happens in the video count; generic statements do "
        "not.\n"
        "- Synonyms and paraphrases of the reference count as matches.\n"
        "Give one score that weighs coverage and specificity together."
    ),
    user_template=(
        "Question: {question}\n"
        "Reference answer: {reference}\n"
        "Answer to rate: {answer}\n\n"
        "Rate the answer's detail with an integer from 0 to 5 (5: the most detailed). Write the rating as a "
        "Python dictionary with the key 'score' whose value is an integer. "
        + _DICT_ONLY.format(example="{{'score': 3}}")
    ),
    max_tokens=64,
    lmms_task="video_dc499",
    read=read_detail,
)

CORRECTNESS = JudgeProtocol(
    name="correctness",
    system=(
        "You check whether an answer to a question about a video is correct. You do not see the video: a "
        "reference answer written by a person stands in for it.\n"
        "- What matters is whether the answer means the same as the reference.\n"
        "- Synonyms and paraphrases of the reference count as matches.\n"
        "- Judge correctness against the reference, not style or length."
    ),
    user_template=(
        "Question: {question}\n"
        "Reference answer: {reference}\n"
        "Answer to check: {answer}\n\n"
        "Say whether the answer is correct ('yes' or 'no') and how well it matches the reference in meaning, "
        "as an integer from 0 to 5 (5: a full match). Write both as a Python dictionary with the keys 'pred' "
        "(the string 'yes' or 'no') and 'score' (an integer). "
        + _DICT_ONLY.format(example="{{'pred': 'no', 'score': 1}}")
    ),
    max_tokens=64,
    lmms_task="moviechat_global, moviechat_breakpoint",
    read=read_correctness,
)

def read_free_answer(reply: str) -> Reading:
    """``answer_from_caption``: the reply is the answer itself (``Verdict.reply``); nothing to score."""
    return Reading(score=None, parsed=bool(reply.strip()))


ANSWER_FROM_CAPTION = JudgeProtocol(
    name="answer_from_caption",
    system=(
        "You answer questions about a video from a written description of it, which is all you know about the "
        "video.\n"
        "- Use only what the description says.\n"
        "- Answer in a short sentence or phrase."
    ),
    user_template=(
        "Description of the video: {answer}\n"
        "Question: {question}\n\n"
        "Give only the short answer, with no explanation."
    ),
    max_tokens=256,
    lmms_task="vdc (first step of VDCscore)",
    read=read_free_answer,
)

SCORE = JudgeProtocol(
    name="score",
    system=score_prompt.SYSTEM_PROMPT,
    user_template=score_prompt.USER_TEMPLATE,
    max_tokens=32,
    lmms_task="",
    read=read_score,
    fixed_version=score_prompt.PROMPT_VERSION,
)

#: The protocols by name.
PROTOCOLS: dict[str, JudgeProtocol] = {p.name: p for p in (DETAIL, CORRECTNESS, ANSWER_FROM_CAPTION, SCORE)}
#: What :meth:`GPTJudge.judge` asks when no protocol is named. Benchmarks name theirs (the task YAML's
#: ``judge`` key, carried in each sample's ``extra["judge_protocol"]``), so this default only serves
#: callers that name none, which keep the judgement they had.
DEFAULT_PROTOCOL = "score"


def get_protocol(name: str | JudgeProtocol | None) -> JudgeProtocol:
    """The protocol called ``name`` (None: :data:`DEFAULT_PROTOCOL`); a ValueError lists the choices."""
    if isinstance(name, JudgeProtocol):
        return name
    try:
        return PROTOCOLS[name or DEFAULT_PROTOCOL]
    except KeyError:
        raise ValueError(f"unknown judge protocol {name!r}; choose from {', '.join(PROTOCOLS)}") from None
