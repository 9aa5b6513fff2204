"""SynthVid's training augmentations: reversed answers, plain scenes, and the ReverseTime / TimeCrop transforms."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from vidspec.decoding.errors import ConfigError
from vidspec.decoding.types import VideoClip
from vidspec.evaluation.synthvid.augment import ReverseTime, TimeCrop, plain_scene, time_reversed_answer


def _facts(*motions, **change):
    objs = [{"colour": "red", "motion": m, "first_frame": 0, "last_frame": 7, "turn_frame": None, "new_colour": None,
             "track": {"growth": 0.0, "spin": 0.0}} for m in motions]
    for k, v in change.items():
        objs[0][k] = v
    return json.dumps({"num_frames": 8, "events": [], "objects": objs})


def test_time_reversed_answers():
    pieces = ["We", " see", " a", " red", " star", " which", " slides", " left", ".", " A", " blue", " cross",
              " stays", " still", "."]
    labels = ["filler"] * 7 + ["motion", "filler", "filler", "colour", "shape", "filler", "motion", "filler"]
    cap = {"question": "Describe the video.", "answer": "".join(pieces), "style": "alpha", "pieces": pieces,
           "labels": labels, "facts": _facts("left", "still")}
    assert time_reversed_answer(cap) == "We see a red star which slides right. A blue cross stays still."
    assert time_reversed_answer({**cap, "answer": "Something else."}) is None  # pieces that are not the answer
    assert time_reversed_answer({**cap, "labels": None}) is None  # a caption without labels
    options = ["A. Moves up.", "B. Stays still.", "C. Moves down.", "D. Grows."]
    mcq = {"question": "How does the red star move?", "options": options, "answer": "A", "task_type": "motion",
           "facts": _facts("up")}
    assert time_reversed_answer(mcq) == "C"
    assert time_reversed_answer({**mcq, "options": options[:2] + ["C. Moves left.", "D. Grows."]}) is None
    assert time_reversed_answer({**mcq, "answer": "B", "facts": _facts("still")}) == "B"
    assert time_reversed_answer({**mcq, "task_type": "colour", "answer": "D"}) == "D"  # not about motion
    assert time_reversed_answer({**mcq, "task_type": None}) is None
    open_q = {"question": "How does the red star move?", "answer": "moves up", "task_type": "motion",
              "facts": _facts("up")}
    assert time_reversed_answer(open_q) == "moves down"
    assert time_reversed_answer({**open_q, "task_type": "count", "answer": "1"}) == "1"
    # scenes whose reversal is not a swap of directions, and questions that name one
    assert time_reversed_answer({**open_q, "facts": _facts("up", first_frame=2)}) is None
    assert time_reversed_answer({**open_q, "facts": _facts("up", turn_frame=3)}) is None
    assert time_reversed_answer({**open_q, "facts": _facts("up", track={"growth": 0.1})}) is None
    assert time_reversed_answer({**open_q, "facts": json.dumps({"num_frames": 8, "events": [{"kind": "x"}],
                                                                "objects": []})}) is None
    assert time_reversed_answer({**open_q, "question": "What colour is the object moving left?"}) is None
    assert time_reversed_answer({k: v for k, v in open_q.items() if k != "facts"}) is None


def test_plain_scene():
    assert plain_scene({"facts": _facts("left", "still")})
    assert not plain_scene({"facts": _facts("left", last_frame=5)})
    assert not plain_scene({"facts": _facts("left", new_colour="blue")})
    assert not plain_scene({"facts": _facts("zigzag")})
    assert not plain_scene({})


@dataclass(frozen=True)
class _Example:  # the shape of the training package's Example
    clip: VideoClip
    prompt: str
    answer: str
    kind: str = ""
    notes: dict[str, Any] = field(default_factory=dict)


def _clip(n=8):
    frames = np.arange(n, dtype=np.uint8)[:, None, None, None] * np.ones((1, 4, 4, 3), np.uint8)
    return VideoClip(frames=frames, fps=4.0, source="clip.mp4", timestamps=tuple(i / 4 for i in range(n)))


def test_reverse_time_transform():
    row = {"question": "How does the red star move?", "answer": "moves up", "task_type": "motion",
           "facts": _facts("up")}
    t = ReverseTime(chance=1.0)
    notes = t.annotate(row)
    assert notes == {"reversed_answer": "moves down"}
    assert t.annotate({**row, "facts": _facts("up", turn_frame=3)}) is None
    assert ReverseTime(chance=0.0).annotate(row) is None
    out = t(_Example(_clip(), "q", "moves up", notes=notes), np.random.default_rng(0))
    assert out.answer == "moves down" and out.clip.frames[:, 0, 0, 0].tolist() == list(range(7, -1, -1))
    assert out.clip.timestamps == _clip().timestamps  # the frames keep their times
    for bad in (-0.1, 1.5, True, "half"):
        with pytest.raises(ConfigError, match="ReverseTime.chance"):
            ReverseTime(chance=bad)


def test_time_crop_transform():
    t = TimeCrop(chance=1.0, min_frames=4)
    assert t.annotate({"facts": _facts("left")}) == {} and t.annotate({"facts": _facts("left", last_frame=5)}) is None
    lengths = set()
    for seed in range(20):
        out = t(_Example(_clip(), "q", "a", notes={}), np.random.default_rng(seed))
        f = out.clip.frames[:, 0, 0, 0].tolist()
        assert 4 <= len(f) <= 8 and f == list(range(f[0], f[0] + len(f))) and out.answer == "a"
        assert out.clip.timestamps == tuple(i / 4 for i in f)
        lengths.add(len(f))
    assert len(lengths) > 1
    for bad in (1, 2.5, True):
        with pytest.raises(ConfigError, match="TimeCrop.min_frames"):
            TimeCrop(min_frames=bad)
