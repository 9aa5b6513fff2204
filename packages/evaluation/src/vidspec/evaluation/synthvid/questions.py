"""Questions about a scene: Video-MME-style multiple choice and open questions with short answers.

Question types: ``colour`` (of the only object of some shape), ``shape`` (of the only object of
some colour), ``motion``, ``count``, ``event`` (what happens to an object) and ``order`` (which
event comes first; needs two events). Objects are named by the colour they have when first seen.

Usage::

    mcqs = make_mcqs(facts, rng, k=3)     # [{"task_type", "question", "options", "answer"}]
    mcq_prompt(mcqs[0]["question"], mcqs[0]["options"])
"""

from __future__ import annotations

import numpy as np

from vidspec.evaluation.synthvid.grammar import COUNT_WORDS
from vidspec.evaluation.synthvid.world import COLOURS, MOTIONS, SHAPES

LETTERS = ("A", "B", "C", "D")
TASK_TYPES = ("colour", "shape", "motion", "count", "event", "order")

#: Video-MME's instruction after the options (the lmms-eval wording, shortened).
MCQ_INSTRUCTION = "Answer with the option's letter from the given choices directly."
OPEN_INSTRUCTION = "Answer the question using a single word or phrase."

MOTION_PHRASES = {
    "left": "moves left",
    "right": "moves right",
    "up": "moves up",
    "down": "moves down",
    "diagonally": "moves diagonally",
    "still": "stays still",
    "grows": "grows",
    "shrinks": "shrinks",
    "rotates": "rotates",
}
EVENT_PHRASES = {"appears": "appears", "disappears": "disappears", "stops": "stops", "turns": "turns {colour}"}

#: Text of the questions; the tokenizer takes its vocabulary from these too.
PHRASE_SETS: tuple[tuple[str, ...], ...] = (
    (
        "what colour is the",
        "what shape is the object",
        "how does the move",
        "how many objects are in the video",
        "what happens to the",
        "which of these happens first",
        "it",
        "color",
        "select the best answer to the following multiple choice question based on the video",
        "respond with only the letter of the correct option",
        MCQ_INSTRUCTION,
        OPEN_INSTRUCTION,
        "the answer is",
        "answer",
        "option",
        "describe",
        "you are a helpful assistant",
    ),
    tuple(MOTION_PHRASES.values()),
    tuple(EVENT_PHRASES.values()),
    LETTERS,
)


def _name(o: dict) -> str:
    return f"the {o['colour']} {o['shape']}"


def _event_phrase(e: dict, objs: list[dict]) -> str:
    if e["type"] == "meet":
        return f"{_name(objs[e['objects'][0]])} and {_name(objs[e['objects'][1]])} meet"
    return f"{_name(objs[e['objects'][0]])} {EVENT_PHRASES[e['type']].format(colour=e['colour'])}"


def _candidates(facts: dict, rng: np.random.Generator) -> dict[str, tuple[str, str, list[str]]]:
    """For each answerable task type: (question, correct short answer, distractor pool)."""
    objs, events = facts["objects"], facts["events"]
    out: dict[str, tuple[str, str, list[str]]] = {}
    shapes = [o["shape"] for o in objs]
    colours = [o["colour"] for o in objs]
    uniq_shape = [o for o in objs if shapes.count(o["shape"]) == 1]
    if uniq_shape:
        o = uniq_shape[int(rng.integers(len(uniq_shape)))]
        out["colour"] = (f"What colour is the {o['shape']}?", o["colour"], [c for c in COLOURS if c != o["colour"]])
    uniq_colour = [o for o in objs if colours.count(o["colour"]) == 1]
    if uniq_colour:
        o = uniq_colour[int(rng.integers(len(uniq_colour)))]
        out["shape"] = (f"What shape is the {o['colour']} object?", o["shape"], [s for s in SHAPES if s != o["shape"]])
    o = objs[int(rng.integers(len(objs)))]
    right = MOTION_PHRASES[o["motion"]]
    out["motion"] = (
        f"How does {_name(o)} move?",
        right,
        [MOTION_PHRASES[m] for m in MOTIONS if m != o["motion"]],
    )
    n = facts["count"]
    out["count"] = ("How many objects are in the video?", COUNT_WORDS[n], [w for w in COUNT_WORDS[1:] if w != COUNT_WORDS[n]])
    single = [e for e in events if e["type"] != "meet"]
    if single:
        e = single[int(rng.integers(len(single)))]
        o = objs[e["objects"][0]]
        right = "it " + EVENT_PHRASES[e["type"]].format(colour=e["colour"])
        pool = ["it appears", "it disappears", "it stops"] + [f"it turns {c}" for c in COLOURS if c != o["colour"]]
        out["event"] = (f"What happens to {_name(o)}?", right, [p for p in pool if p != right])
    if len(events) >= 2:
        right = _event_phrase(events[0], objs)
        pool = [_event_phrase(e, objs) for e in events[1:]]
        # Pad with events that do not happen, so that every question has four options.
        for o in objs:
            for kind in ("appears", "disappears", "stops"):
                fake = f"{_name(o)} {kind}"
                if fake != right and fake not in pool:
                    pool.append(fake)
        out["order"] = ("Which of these happens first?", right, pool)
    return out


def _options(right: str, pool: list[str], rng: np.random.Generator) -> tuple[list[str], str]:
    # Real events first in the order pool so "order" questions keep them as distractors.
    pool = list(dict.fromkeys(pool))
    picks = [right] + [pool[i] for i in rng.choice(len(pool), size=3, replace=False)]
    perm = rng.permutation(4)
    opts = [picks[i] for i in perm]
    letter = LETTERS[int(np.argwhere(perm == 0)[0, 0])]
    return [f"{L}. {o[0].upper()}{o[1:]}." for L, o in zip(LETTERS, opts)], letter


def make_mcqs(facts: dict, rng: np.random.Generator, k: int) -> list[dict]:
    """Up to ``k`` multiple-choice questions of distinct types.

    Returns:
        Dicts with ``task_type``, ``question``, ``options`` (four strings ``"A. ..."``) and
        ``answer`` (a letter).
    """
    cands = _candidates(facts, rng)
    types = [t for t in TASK_TYPES if t in cands]
    chosen = [types[i] for i in rng.permutation(len(types))[:k]]
    out = []
    for t in chosen:
        q, right, pool = cands[t]
        options, letter = _options(right, pool, rng)
        out.append({"task_type": t, "question": q, "options": options, "answer": letter})
    return out


def make_open_questions(facts: dict, rng: np.random.Generator, k: int) -> list[dict]:
    """Up to ``k`` open questions of distinct types with short answers (``task_type``, ``question``, ``answer``)."""
    cands = _candidates(facts, rng)
    types = [t for t in TASK_TYPES if t in cands]
    chosen = [types[i] for i in rng.permutation(len(types))[:k]]
    return [{"task_type": t, "question": cands[t][0], "answer": cands[t][1]} for t in chosen]


def mcq_prompt(question: str, options: list[str]) -> str:
    """The Video-MME prompt: question, one option per line, then the instruction."""
    return "\n".join([question, *options, MCQ_INSTRUCTION])
