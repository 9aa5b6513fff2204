"""Derived multiple-choice tables for training experiments: one question type of a SynthVid ``mcq`` table, answered
with the option's text instead of its letter (or the text, then the letter), or with one-word options.

RESULTS 27.3 asks why the release-size target cannot answer motion questions by letter although it states the motion
in captions and open questions. These tables separate the two halves of a letter answer: computing the motion where
the answer starts (``--answer text``: the same prompt, answered ``Moves right.``) and binding it to a letter
(``--options last-word``: ``A. right.``, every option one token, as colour options are). Text answers end their prompt
with ``--instruction`` (default: answer with the option's text, so the two can be mixed in one run; RESULTS 27.3's
first text run used the letter instruction). Each table keeps the source's
``video`` paths (relative to DATA), so train on it with ``--data.video_root DATA``::

    python benchmarks/mcq_variants.py --data DATA --out DIR --type motion --answer text
    vidspec train fit --config CONFIG --data.path DIR --data.tables '[mcqtext]' --data.video_root DATA

Writes ``DIR/mcq`` (letter answers), ``DIR/mcqtext`` (text answers) or ``DIR/mcqtextletter`` (``--answer
text-letter``: ``Moves right. Answer: B``), a DatasetDict of the source's splits (train,
validation; test too when present), and prints the row counts and one converted row.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ANSWERS = ("letter", "text", "text-letter")
#: the instruction of text-answer rows by default: mixed with letter rows of the same question, the prompt must say
#: which answer is wanted (with the letter rows' own instruction the two are indistinguishable)
TEXT_INSTRUCTION = "Answer with the option's text from the given choices directly."
#: the default instruction of text-then-letter rows (``Moves right. Answer: B``)
TEXT_LETTER_INSTRUCTION = "Answer with the option's text, then its letter."
#: what separates a text-then-letter answer's text from its letter
LETTER_MARK = " Answer: "
#: the table each answer form is written to
TABLES = {"letter": "mcq", "text": "mcqtext", "text-letter": "mcqtextletter"}
OPTIONS = ("as-is", "last-word")


def option_text(option: str) -> str:
    """``"A. Moves right."`` -> ``"Moves right."``."""
    return option.split(". ", 1)[1] if ". " in option else option


def last_word(option: str) -> str:
    """``"A. Moves right."`` -> ``"A. right."`` (the distinguishing word, lower case, as its own option)."""
    letter, _, text = option.partition(". ")
    return f"{letter}. {text.rstrip('.').split()[-1].lower()}."


def convert(row: dict, answer: str, options: str, instruction: str) -> dict:
    """One ``mcq`` row in the variant's form (``question``/``answer``; ``options`` only for letter answers, whose
    instruction the data module adds; ``instruction`` ends a text answer's prompt)."""
    opts = list(row["options"])
    if options == "last-word":
        opts = [last_word(o) for o in opts]
    out = {"video": row["video"], "task_type": row["task_type"]}
    if answer == "letter":
        return {**out, "question": row["question"], "options": opts, "answer": row["answer"]}
    # the prompt the letter rows get (question, options, instruction), answered by the right option's text (and,
    # for text-letter, then its letter: the letter is chosen after the motion is stated, not before)
    right = opts["ABCDEFGH".index(row["answer"])]
    answer_text = option_text(right) if answer == "text" else f"{option_text(right)}{LETTER_MARK}{row['answer']}"
    return {**out, "question": "\n".join([row["question"], *opts, instruction]), "answer": answer_text}


def main() -> None:
    from datasets import DatasetDict, load_from_disk

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="a SynthVid folder (with an mcq table)")
    ap.add_argument("--out", required=True, help="folder to write the table into")
    ap.add_argument("--type", default=None, help="keep only this question type (colour, shape, motion, count)")
    ap.add_argument("--answer", choices=ANSWERS, default="letter")
    ap.add_argument("--options", choices=OPTIONS, default="as-is")
    ap.add_argument("--instruction", default=None,
                    help="the instruction after the options of text-answer rows (default: answer with the option's "
                         "text, or its text then its letter; letter rows keep the data module's)")
    args = ap.parse_args()

    source = Path(args.data) / "mcq"
    try:
        table = load_from_disk(str(source))
    except FileNotFoundError:
        print(f"mcq_variants: no mcq table at {source}", file=sys.stderr)
        sys.exit(2)
    instruction = args.instruction or (TEXT_LETTER_INSTRUCTION if args.answer == "text-letter" else TEXT_INSTRUCTION)
    out = {}
    for split, rows in table.items():
        if args.type:
            rows = rows.filter(lambda r: r["task_type"] == args.type)
        if len(rows) == 0:
            print(f"mcq_variants: no {args.type!r} questions in {source} [{split}]", file=sys.stderr)
            sys.exit(2)
        out[split] = rows.map(lambda r: convert(r, args.answer, args.options, instruction),
                              remove_columns=rows.column_names)
    name = TABLES[args.answer]
    DatasetDict(out).save_to_disk(str(Path(args.out) / name))
    print({split: len(rows) for split, rows in out.items()})
    print(out[next(iter(out))][0])


if __name__ == "__main__":
    main()
