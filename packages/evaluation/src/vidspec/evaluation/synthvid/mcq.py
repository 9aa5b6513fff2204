"""Multiple-choice scoring: the option letter in a model's free text, and accuracy (torchmetrics).

:func:`extract_choice` reads answers such as ``"B"``, ``"b) red"``, ``"The answer is (B)."``,
``"Answer: C"``, ``"(D) It rotates."`` or ``"I think it is option A"``. Explicit answer phrases
win over a letter that merely starts the text, which wins over any other lone capital letter.
Text that names no option (or names an option's text exactly instead of its letter) can be matched
against the options with ``options=``.

Usage::

    extract_choice("The answer is (B).")              # "B"
    metric = MCQAccuracy()
    metric.update(["B", "answer: c"], ["B", "D"])
    metric.compute()                                  # tensor(0.5000)
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch
from torchmetrics import Metric
from torchmetrics.classification import MulticlassAccuracy

DEFAULT_LETTERS = "ABCD"

# Ordered from most to least explicit; each captures the letter.
_PATTERNS = [
    r"(?:answer|option|choice)\s*(?:is|:|=|would be|should be)?\s*(?:option\s*)?[\(\[]?\s*([A-Z])\b(?![a-z'])",
    r"^\s*[\(\[]?([A-Z])[\)\]\.:,](?:\s|$)",
    r"^\s*[\(\[]?([A-Z])\s*$",
    # "B Red" but not "A red circle ...", where "A" is the article.
    r"^\s*([A-Z])\s+(?=[A-Z0-9\(\[-]|$)",
    r"[\(\[]([A-Z])[\)\]]",
    r"\b([A-Z])[\)\.:](?:\s|$)",
]


def extract_choice(text: str | None, letters: str = DEFAULT_LETTERS, options: Sequence[str] | None = None) -> str | None:
    """The option letter a free-text answer picks, or None.

    Args:
        text: the model's answer.
        letters: valid letters (uppercase).
        options: the options as shown (``"A. Red."``); when no letter is found, an answer that
            equals one option's text (case and punctuation ignored) picks that option.

    Returns:
        An uppercase letter from ``letters``, or None when the answer names none.
    """
    if not text:
        return None
    s = text.strip()
    # Lowercase single letters ("b) red", "answer: c") count as letters only in these positions,
    # never inside words, so the article "a" in running text is not read as option A.
    head = re.match(r"^\s*[\(\[]?([a-zA-Z])(?:[\)\]\.:,]|\s*$)", s)
    if head and head.group(1).upper() in letters:
        return head.group(1).upper()
    low = re.search(r"(?:answer|option|choice)\s*(?:is|:)?\s*[\(\[]?([a-dA-D])[\)\]\.]?(?:\s|$|[,.])", s, re.I)
    if low and low.group(1).upper() in letters:
        return low.group(1).upper()
    for pat in _PATTERNS:
        for m in re.finditer(pat, s, flags=re.I if pat is _PATTERNS[0] else 0):
            letter = m.group(1).upper()
            if letter in letters:
                return letter
    if options:
        norm = _norm(s)
        for letter, opt in zip(letters, options):
            body = re.sub(r"^\s*[A-Z][\.\)]\s*", "", opt)
            if norm and norm == _norm(body):
                return letter
    return None


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9 ]", "", s.lower()).strip()


class MCQAccuracy(Metric):
    """Accuracy of free-text multiple-choice answers; an answer with no letter counts as wrong.

    Wraps ``torchmetrics.classification.MulticlassAccuracy`` over ``len(letters) + 1`` classes, the
    extra class standing for "no valid letter", which no reference answer has.
    """

    full_state_update = False

    def __init__(self, letters: str = DEFAULT_LETTERS, **kwargs) -> None:
        super().__init__(**kwargs)
        self.letters = letters
        self.inner = MulticlassAccuracy(num_classes=len(letters) + 1, average="micro")

    def _index(self, letter: str | None) -> int:
        return self.letters.index(letter) if letter in tuple(self.letters) else len(self.letters)

    def update(self, answers: Sequence[str], references: Sequence[str], options: Sequence[Sequence[str]] | None = None) -> None:
        """Add a batch: free-text ``answers`` and reference letters."""
        if len(answers) != len(references):
            raise ValueError(f"{len(answers)} answers but {len(references)} references")
        preds = [
            self._index(extract_choice(a, self.letters, options[i] if options else None)) for i, a in enumerate(answers)
        ]
        target = [self._index(r.strip().upper()) for r in references]
        self.inner.update(torch.tensor(preds), torch.tensor(target))

    def compute(self) -> torch.Tensor:
        return self.inner.compute()

    def reset(self) -> None:
        super().reset()
        self.inner.reset()


def mcq_accuracy(answers: Sequence[str], references: Sequence[str]) -> float:
    """Accuracy of free-text answers against reference letters (0.0 for no samples)."""
    if not answers:
        return 0.0
    m = MCQAccuracy()
    m.update(answers, references)
    return float(m.compute())
