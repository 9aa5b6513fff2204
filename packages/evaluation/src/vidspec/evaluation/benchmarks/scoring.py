"""Multiple-choice answer extraction and scoring as lmms-eval does it, per benchmark.

Scores are only comparable with published ones when the answer is read out of the model's text the
way the published harness reads it. lmms-eval reads each benchmark differently:

- ``videomme``: its shared MCQ extractor, a ranked search for the letter (at the start or end, after
  "the answer is", in parentheses, before a period ...); a reply with no letter scores 0.
- ``mvbench``: a reply of the form ``"B. text"`` gives its letter; otherwise, after punctuation is
  removed, the first stand-alone letter A-E (in either case) is the choice.
- ``longvideobench``: answer phrases ("The best answer is", ...) are removed and the first capital
  A-E anywhere is the choice; a reply without one gets a random letter (LongVideoBench's own rule).
  Here that draw is seeded by the sample id, so a rerun scores the same.

Where lmms-eval is installed (its own environment, ``make install-lmms``) its functions are called;
elsewhere the equivalents below, written for vidspec, are used. ``test_lmms_scoring.py`` checks,
under lmms-eval, that both agree on a set of typical replies. Every scored record names the
scorer that produced it (:func:`scorer_name`).

:func:`score_mcq` is what the evaluation runner calls; the benchmark's ``scoring`` key (task YAML)
picks the protocol, ``None`` keeps vidspec's general extractor (SynthVid).
"""

from __future__ import annotations

import hashlib
import random
import re
import string
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

#: Protocols :func:`score_mcq` knows, by the ``scoring`` key of a task YAML.
PROTOCOLS: tuple[str, ...] = ("videomme", "mvbench", "longvideobench")


@cache
def lmms_eval_version() -> str | None:
    """The installed lmms-eval's version, or None when it is not installed."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("lmms_eval")
    except PackageNotFoundError:
        return None


def scorer_name(protocol: str) -> str:
    """Who scores ``protocol`` here: ``"lmms-eval 0.7.3 videomme"`` or ``"vidspec videomme"``."""
    v = lmms_eval_version()
    return f"lmms-eval {v} {protocol}" if v and _lmms_function(protocol) is not None else f"vidspec {protocol}"


# ---- vidspec's equivalents ----------------------------------------------------------------------

# How sure a letter found in a given form is that it is the answer (higher wins; then the later one).
_START, _END, _PHRASE, _FALLBACK = 10, 9, 7, 0
_MARKED = (("({})", 6), ("{}.", 5), ("{}:", 4), ("{})", 3), ("{} ", 2))
_PHRASES = ("the answer is", "answer is", "the correct answer is", "correct answer is", "the best answer is",
            "best answer is", "the correct option is", "correct option is", "the best option is", "best option is",
            "the choice is", "choice is", "the correct choice is", "correct choice is", "i choose", "i select",
            "i pick", "my answer is", "my choice is")


def extract_letter(text: str, letters: Sequence[str] = "ABCD") -> str:
    """The option letter a free-form reply gives, or ``""`` (Video-MME's reading; see the module doc).

    Letters are matched in upper case only. Every way a letter can appear is a candidate with a rank:
    the reply starting with a stand-alone letter (10) or ending with one (9), a letter after an answer
    phrase such as "the answer is" (7), then a letter in parentheses (6), before a period (5), a colon
    (4), a closing parenthesis (3) or a space (2). The highest rank wins and, within it, the later
    position. Only when nothing matched does any occurrence of a letter count (the last one).
    """
    if not text or not text.strip():
        return ""
    body = text.strip()
    for ch in ",.!?;:'\"":  # one character at a time, in this order, as the reference reading does
        body = body.strip(ch)
    padded = f" {body} "
    found: list[tuple[int, int, str]] = []
    for letter in letters:
        for pattern, rank in _MARKED:
            at = padded.rfind(pattern.format(letter))
            if at >= 0:
                found.append((rank, at, letter))
    low = padded.lower()
    for phrase in _PHRASES:
        at = low.find(phrase)
        if at >= 0:
            for letter in letters:
                pos = padded.find(letter, at + len(phrase))
                if pos >= 0:
                    found.append((_PHRASE, pos, letter))
    core = padded.strip()
    for letter in letters:
        if core.startswith(letter) and (len(core) == 1 or not core[1].isalpha()):
            found.append((_START, 0, letter))
        if core.endswith(letter) and (len(core) == 1 or not core[-2].isalpha()):
            found.append((_END, len(padded) - 1, letter))
    if not found:
        found = [(_FALLBACK, padded.rfind(letter), letter) for letter in letters if letter in padded]
    return max(found)[2] if found else ""


_PUNCT_STRIP = str.maketrans({c: " " for c in ";/[]\"{}()=+\\_->`<@,?!"})


def mvbench_choice(text: str) -> str:
    """MVBench's reading of a reply: the letter of ``"X. ..."``, else the first stand-alone A-E (any case)."""
    body = (text or "").strip()
    m = re.match(r"^([A-Ea-e])\.\s*\S", body)
    if m:
        return m.group(1).upper()
    cleaned = body.replace("\n", " ").replace("\t", " ").translate(_PUNCT_STRIP)
    cleaned = re.sub(r"\.(?!\d)", "", cleaned).strip()
    for ch in "'\")(":
        cleaned = cleaned.strip(ch)
    cleaned = cleaned.strip().lower()
    m = re.search(r"\b([a-e])\b", cleaned)
    return m.group(1).upper() if m else cleaned


_LVB_PREFIXES = ("The best answer is", "The correct answer is", "The answer is", "The answer",
                 "The best option is", "The correct option is", "Best answer:", "Best option:")


def longvideobench_choice(text: str, letters: Sequence[str], seed_key: str) -> str:
    """LongVideoBench's reading: the first capital A-E after answer phrases are removed, else a seeded draw."""
    body = (text or "").strip()
    for prefix in _LVB_PREFIXES:
        body = body.replace(prefix, "")
    m = re.search(r"[ABCDE]", body)
    if m:
        return m.group(0)
    return _seeded(seed_key).choice(list(letters))


def _seeded(key: str) -> random.Random:
    return random.Random(int(hashlib.sha256(key.encode()).hexdigest()[:16], 16))


# ---- lmms-eval's own functions, where installed ----------------------------------------------------


@cache
def _lmms_function(protocol: str) -> Callable[..., Any] | None:
    """lmms-eval's function for ``protocol``, or None when lmms-eval (or that function) is not there."""
    if lmms_eval_version() is None:
        return None
    try:
        if protocol == "videomme":
            from lmms_eval.tasks._task_utils.mcq_extract import extract_mcq_answer

            return extract_mcq_answer
        if protocol == "mvbench":
            from lmms_eval.tasks.mvbench.utils import mcq_acc

            return mcq_acc
        if protocol == "longvideobench":
            from lmms_eval.tasks.longvideobench.utils import parse_multi_choice_response

            return parse_multi_choice_response
    except Exception:  # an lmms-eval without that module: fall back to vidspec's reading
        return None
    return None


def score_mcq(protocol: str | None, text: str, answer_letter: str | None, n_options: int,
              sample_id: str = "") -> dict[str, Any]:
    """Score one multiple-choice reply under ``protocol``.

    Args:
        protocol: one of :data:`PROTOCOLS`, or None for vidspec's general extractor.
        text: the model's reply.
        answer_letter: the correct letter.
        n_options: how many options the question offered.
        sample_id: seeds LongVideoBench's draw for replies without a letter.

    Returns:
        ``choice`` (the letter read, ``""`` or the cleaned reply when none), ``correct``, ``score``
        (1.0 / 0.0) and ``scorer`` (:func:`scorer_name`).
    """
    letters = string.ascii_uppercase[: max(n_options, 1)]
    if protocol is None:
        from vidspec.evaluation.synthvid.mcq import extract_choice

        choice = extract_choice(text, letters=letters) or ""
        correct = choice == answer_letter
        return dict(choice=choice, correct=correct, score=float(correct), scorer="vidspec general")
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown scoring protocol {protocol!r}; choose from {', '.join(PROTOCOLS)}")
    fn = _lmms_function(protocol)
    if protocol == "videomme":
        choice = fn(text, choices=list(letters)) if fn else extract_letter(text, letters)
        correct = bool(choice) and choice.lower() == (answer_letter or "").lower()
    elif protocol == "mvbench":
        choice = mvbench_choice(text)
        correct = bool(fn(answer_letter, text)) if fn else choice == answer_letter
    else:
        if fn:
            state = random.getstate()
            random.seed(int(hashlib.sha256(sample_id.encode()).hexdigest()[:16], 16))
            try:
                choice = fn(text, list(letters), {})
            finally:
                random.setstate(state)
        else:
            choice = longvideobench_choice(text, letters, sample_id)
        correct = choice == answer_letter
    return dict(choice=choice, correct=bool(correct), score=float(bool(correct)), scorer=scorer_name(protocol))
