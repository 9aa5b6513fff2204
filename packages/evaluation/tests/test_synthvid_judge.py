"""The SynthVid fact judge: property tests over many random scenes and every caption style."""

from __future__ import annotations

import numpy as np
import pytest

from vidspec.evaluation.synthvid.grammar import STYLES, greedy_caption, sample_caption
from vidspec.evaluation.synthvid.judge import CATEGORIES, judge_caption
from vidspec.evaluation.synthvid.world import BACKGROUNDS, COLOURS, PRESETS, sample_scene

ALL_COLOURS = [*COLOURS, *BACKGROUNDS]


def _scenes(n, seed):
    rng = np.random.default_rng(seed)
    names = ["default", "hard", "long", "easy"]
    return [sample_scene(rng, PRESETS[names[i % 4]]).facts() for i in range(n)]


FACTS = _scenes(120, seed=123)


@pytest.mark.parametrize("style", sorted(STYLES))
def test_every_grammar_caption_is_fully_precise(style):
    rng = np.random.default_rng(len(style))
    for facts in FACTS:
        for cap in (sample_caption(facts, rng, style), greedy_caption(facts, style)):
            r = judge_caption(cap.text, facts)
            assert r.precision == 1.0, (cap.text, r.hallucinations)
            assert r.claims, cap.text


def test_verbose_captions_recall_objects_motions_events_and_order():
    for facts in FACTS[:40]:
        r = judge_caption(greedy_caption(facts, "verbose").text, facts)
        cat = r.per_category()
        assert cat["object"]["recall"] == 1.0 and cat["motion"]["recall"] == 1.0
        assert cat["event"]["recall"] == 1.0 and cat["order"]["recall"] == 1.0


def _swap_one_colour(cap, facts, rng):
    """Replace one colour word by another colour that names no object of the following shape."""
    idx = [k for k, lab in enumerate(cap.labels) if lab == "colour"]
    k = idx[int(rng.integers(len(idx)))]
    old = cap.pieces[k].strip()
    nxt = cap.pieces[k + 1].strip().lower() if k + 1 < len(cap.pieces) else ""
    options = [
        c for c in ALL_COLOURS
        if c != old.lower() and not any(o["colour"] == c and o["shape"] == nxt for o in facts["objects"])
    ]
    new = options[int(rng.integers(len(options)))]
    new = new.capitalize() if old[0].isupper() else new
    pieces = list(cap.pieces)
    pieces[k] = pieces[k].replace(old, new)
    return "".join(pieces)


@pytest.mark.parametrize("style", sorted(STYLES))
def test_one_colour_swap_is_exactly_one_hallucination(style):
    rng = np.random.default_rng(99)
    for facts in FACTS:
        cap = sample_caption(facts, rng, style)
        swapped = _swap_one_colour(cap, facts, rng)
        r = judge_caption(swapped, facts)
        assert len(r.hallucinations) == 1, (swapped, r.hallucinations)


def _facts_two_objects():
    return {
        "count": 2, "background": "black",
        "objects": [
            {"id": 0, "colour": "red", "shape": "circle", "size": "large", "motion": "left"},
            {"id": 1, "colour": "blue", "shape": "square", "size": "small", "motion": "still"},
        ],
        "events": [
            {"type": "turns", "frame": 3, "objects": [1], "colour": "green"},
            {"type": "disappears", "frame": 6, "objects": [0], "colour": None},
        ],
    }


@pytest.mark.parametrize(
    ("text", "n_false"),
    [
        ("There is no red object.", 1),
        ("There is no yellow object.", 0),
        ("There is not a red circle.", 1),
        ("There is no green star.", 0),
        ("Nothing disappears.", 1),
        ("No object appears.", 0),
        ("The red circle does not move.", 1),
        ("The blue square does not move.", 0),
        ("The blue square does not rotate.", 0),
        ("The red circle does not disappear.", 1),
    ],
)
def test_negations(text, n_false):
    r = judge_caption(text, _facts_two_objects())
    assert any(c.negated for c in r.claims)
    assert len(r.hallucinations) == n_false
    assert all(c.negated for c in r.hallucinations)


def test_claims_per_category_and_order():
    f = _facts_two_objects()
    good = "There are two objects on a black background. A large red circle moves left. A blue square stays still. First, the blue square turns green. Then, the red circle disappears."
    r = judge_caption(good, f)
    assert r.precision == 1.0 and r.recall == pytest.approx(10 / 11)  # the square's size is not stated
    wrong_order = "The red circle disappears. Then, the blue square turns green."
    r = judge_caption(wrong_order, f)
    assert [c.category for c in r.hallucinations] == ["order"]
    r = judge_caption("There are three shapes. A small red circle moves up.", f)
    assert sorted(c.category for c in r.hallucinations) == ["count", "motion", "size"]
    assert set(r.per_category()) == set(CATEGORIES)


@pytest.mark.parametrize(
    "text",
    ["", "lorem ipsum dolor", "!!!", "The the the red", "It it it.", "A " * 500, "1 2 3 four objects", "red", "\n\n"],
)
def test_free_text_does_not_crash(text):
    r = judge_caption(text, _facts_two_objects())
    assert 0.0 <= r.precision <= 1.0 and 0.0 <= r.recall <= 1.0
    assert isinstance(r.to_dict()["per_category"], dict)
