"""SynthVid's training augmentations: time reversal and time crop, as example transforms.

SynthVid rows carry their scene's exact facts (``facts``: objects, motions, events) and a caption's ``pieces``
with their word ``labels``, so for some scenes the answer for a changed clip is known exactly:

- :class:`ReverseTime` plays the clip backwards and trains on the answer for that (an object that moves left
  moves right, one that moves up moves down; still objects, colours, shapes and counts stay as they are);
- :class:`TimeCrop` keeps a run of the clip's frames, whose answer is the same.

Both hold only for a :func:`plain_scene`. SynthVid's easy world starts a moving object at the edge it moves away
from, so where an object is in the first (or last) frame tells its motion; in a run of frames, played either way,
it tells much less, and a model has to read the change over the frames.

They implement the training package's example-transform protocol
(``vidspec.draft_training.transforms.ExampleTransform``) by its shape alone, without importing the training
package; a training recipe selects them by class path::

    data:
      init_args:
        transforms:
          - class_path: vidspec.evaluation.synthvid.augment.TimeCrop
            init_args: {chance: 0.5, min_frames: 4}
          - class_path: vidspec.evaluation.synthvid.augment.ReverseTime
            init_args: {chance: 0.5}
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from vidspec.decoding.errors import ConfigError

_OPPOSITE = {"left": "right", "right": "left", "up": "down", "down": "up"}
_DIRECTION = re.compile(r"\b(left|right|up|down)\b", re.IGNORECASE)
#: The columns of a SynthVid row these transforms read (beyond video, question, answer, options, style, task_type).
FACT_COLUMNS = ("facts", "pieces", "labels")


def _swap_directions(text: str) -> str:
    def swap(m: re.Match) -> str:
        word = _OPPOSITE[m.group(1).lower()]
        return word.capitalize() if m.group(1)[0].isupper() else word
    return _DIRECTION.sub(swap, text)


def plain_scene(r: Mapping[str, Any]) -> bool:
    """Whether a SynthVid row's scene (its ``facts``) only has objects that are there from the first frame to the
    last, each moving one way or still, without events, turns, growth, spin or colour changes: any run of its
    frames, forwards or backwards, then shows the same objects with the same (or, backwards, opposite) motions."""
    facts = r.get("facts")
    if not facts:
        return False
    f = json.loads(facts) if isinstance(facts, str) else facts
    n = int(f.get("num_frames") or 0)
    if f.get("events") or n < 2 or not f.get("objects"):
        return False
    for o in f["objects"]:
        track = o.get("track") or {}
        if (o.get("motion") not in (*_OPPOSITE, "still") or o.get("first_frame", 0) != 0
                or o.get("last_frame", n - 1) != n - 1 or o.get("turn_frame") is not None
                or o.get("new_colour") is not None or track.get("growth") or track.get("spin")):
            return False
    return True


def time_reversed_answer(r: Mapping[str, Any], plain: bool | None = None) -> str | None:
    """The answer of a SynthVid row for its video played backwards, or None where the row does not say it.

    It is known only for a :func:`plain_scene` (``plain``: its value for ``r`` when the caller has it, so the facts
    are not parsed again). Captions need their ``pieces`` and ``labels``: the pieces labelled ``motion`` are
    swapped. A motion MCQ takes the letter of the option that states the opposite motion (None when no option
    does); other MCQs and open questions keep their answer, with the directions of an open motion answer swapped.
    A question that names a direction is left alone (None).
    """
    if _DIRECTION.search(r.get("question") or "") or not (plain_scene(r) if plain is None else plain):
        return None
    answer, kind = str(r["answer"]), r.get("task_type")
    if r.get("options"):
        if kind != "motion":
            return answer if kind else None
        letters = [opt.split(".", 1)[0].strip() for opt in r["options"]]
        bodies = [opt.split(".", 1)[1].strip() if "." in opt else opt for opt in r["options"]]
        if answer not in letters:
            return None
        want = _swap_directions(bodies[letters.index(answer)])
        return letters[bodies.index(want)] if want in bodies else None
    if r.get("labels") is not None:  # a caption: its motion pieces swapped
        pieces, labels = r.get("pieces"), r["labels"]
        if isinstance(pieces, str) or isinstance(labels, str):
            return None
        if "".join(pieces) != answer:
            return None
        return "".join(_swap_directions(p) if lab == "motion" else p for p, lab in zip(pieces, labels))
    if kind is None or r.get("style") is not None:  # a caption without labels, or an untyped question
        return None
    return _swap_directions(answer) if kind == "motion" else answer


def _chance(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ConfigError(f"{name} must be a probability in [0, 1], got {value!r}")
    return float(value)


class ReverseTime:
    """Show a training example with its frames in reverse order and its answer for that, with chance ``chance``.

    Applies to rows whose reversed answer is known (:func:`time_reversed_answer`); the frames keep their times.

    Args:
        chance: the probability that an example it applies to is reversed, drawn per example and epoch.

    Raises:
        ConfigError: ``chance`` is not a probability.
    """

    columns = FACT_COLUMNS
    keeps_frame_count = True
    needs = "SynthVid's facts, and captions their pieces and labels, to know the answer played backwards"

    def __init__(self, chance: float = 0.5):
        self.chance = _chance("ReverseTime.chance", chance)

    def __repr__(self) -> str:
        return f"ReverseTime(chance={self.chance})"

    def annotate(self, row: Mapping[str, Any]) -> Mapping[str, Any] | None:
        if self.chance == 0:
            return None
        answer = time_reversed_answer(row)
        return None if answer is None else {"reversed_answer": answer}

    def __call__(self, example: Any, rng: np.random.Generator) -> Any:
        if rng.random() >= self.chance:
            return example
        clip = replace(example.clip, frames=np.ascontiguousarray(example.clip.frames[::-1]))
        return replace(example, clip=clip, answer=example.notes["reversed_answer"])


class TimeCrop:
    """Show a training example of a :func:`plain_scene` only a run of its frames, with chance ``chance``.

    The run has at least ``min_frames`` frames (all of them when the clip has fewer); its length and start are
    drawn per example and epoch. The answer stays the same: the same objects move the same ways. The clips of a
    batch then differ in length, which Qwen2.5-VL batches take and LLaVA-OV batches do not.

    Args:
        chance: the probability that an example it applies to is cropped.
        min_frames: the fewest frames a run keeps (at least 2).

    Raises:
        ConfigError: ``chance`` is not a probability or ``min_frames`` is not an integer >= 2.
    """

    columns = FACT_COLUMNS
    keeps_frame_count = False
    needs = "SynthVid's facts, to know which scenes any run of frames shows alike"

    def __init__(self, chance: float = 0.5, min_frames: int = 4):
        self.chance = _chance("TimeCrop.chance", chance)
        if isinstance(min_frames, bool) or not isinstance(min_frames, int) or min_frames < 2:
            raise ConfigError(f"TimeCrop.min_frames must be an integer >= 2 (frames), got {min_frames!r}")
        self.min_frames = min_frames

    def __repr__(self) -> str:
        return f"TimeCrop(chance={self.chance}, min_frames={self.min_frames})"

    def annotate(self, row: Mapping[str, Any]) -> Mapping[str, Any] | None:
        return {} if self.chance > 0 and plain_scene(row) else None

    def __call__(self, example: Any, rng: np.random.Generator) -> Any:
        if rng.random() >= self.chance:
            return example
        clip = example.clip
        n = clip.num_frames
        length = int(rng.integers(min(self.min_frames, n), n + 1))
        start = int(rng.integers(0, n - length + 1))
        clip = replace(clip, frames=clip.frames[start:start + length],
                       timestamps=tuple(clip.timestamps[start:start + length]))
        return replace(example, clip=clip)
