"""The caption grammar: facts fixed by the scene, wording chosen at random or by a style.

A caption states the object count and background, one description per object (size, colour,
shape, motion) and the events in time order. Every wording decision is a named *choice point*
(verb synonyms, connectives, optional clauses, clause order, articles, how many sentences), and a
:class:`CaptionStyle` is a seeded preference over the options of every choice point. Sampling a
caption draws each choice from the style's weights; :func:`greedy_caption` takes the favourite
option everywhere (what a model trained on that style would write greedily).

Each word has one fixed label (:data:`WORD_LABELS`): a visual category (colour, shape, size,
motion, count, event) or ``filler``. The grammar never uses a visual word as filler, so labels
of a tokenized caption can be recovered from the tokens alone (:func:`word_label`), which is what
makes SynthVid's anchor/filler ground truth exact.

Usage::

    cap = sample_caption(facts, np.random.default_rng(0), get_style("alpha"))
    cap.text, cap.pieces, cap.labels
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from vidspec.decoding.errors import ConfigError
from vidspec.evaluation.synthvid.world import BACKGROUNDS, COLOURS, EVENTS, MOTIONS, SHAPES, SIZES

T = TypeVar("T")

#: The prompt that goes with every caption (VideoDetailCaption's ``question``).
CAPTION_PROMPT = "Describe the video in detail."

COUNT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven")
PLURALS = {s: (s + "es" if s.endswith(("s", "x")) else s + "s") for s in SHAPES}
PUNCT = (".", ",", "?", ":")

#: Label of every visual word; all other words (and punctuation) are ``filler``.
WORD_LABELS: dict[str, str] = {
    **{c: "colour" for c in (*COLOURS, *BACKGROUNDS)},
    **{s: "shape" for s in SHAPES},
    **{p: "shape" for p in PLURALS.values()},
    **{s: "size" for s in SIZES},
    **{m: "motion" for m in MOTIONS},
    **{c: "count" for c in COUNT_WORDS},
    **{e: "event" for e in EVENTS},
    "meets": "event",
}
VISUAL_LABELS = ("colour", "shape", "size", "motion", "count", "event")
LABELS = (*VISUAL_LABELS, "filler")


def word_label(word: str) -> str:
    """Label of one word (case and surrounding spaces ignored): a visual category or ``filler``."""
    return WORD_LABELS.get(word.strip().lower(), "filler")


# --- wording options; each string is a space-separated word sequence ("" means leave out) -------
NOUN_SG = ("object", "shape", "item")
NOUN_PL = ("objects", "shapes", "items")
THERE_SG = ("there is", "the video shows", "we see", "the clip shows")
THERE_PL = ("there are", "the video shows", "we see", "the clip shows")
INTRO_PREFIX = ("in this video ,", "in the clip ,")
TOTAL_PREFIX = ("in total ,", "overall ,", "altogether ,")
BG_PREP = ("on a", "against a")
BG_NOUN = ("background", "backdrop")
MOVE_VERB = ("moves", "slides", "travels", "drifts", "glides", "heads")
VERT_VERB = ("moves", "slides", "travels", "drifts", "floats")
SIDE_PREP = ("to the", "towards the", "")
VERT_ADV = ("", "straight")
MOVE_ADV = ("", "slowly", "steadily", "smoothly")
STILL_VERB = ("stays", "remains", "sits", "rests")
SCALE_ADV = ("", "slowly", "steadily", "gradually")
SPIN_TAIL = ("in place", "around its centre", "on the spot")
MOTION_TAIL = ("throughout the video", "during the clip", "the whole time")
DESC_TEMPLATE = ("plain", "there", "see", "visible")
SEE = ("we can see", "we see", "you can see")
VISIBLE = ("is visible and", "can be seen and", "is shown and")
REL = ("that", "which")
JOIN_OBJECTS = ("sentences", "and", "while")
OBJECT_ORDER = ("id", "reverse", "size")
ARTICLE = ("a", "the")
FIRST_CONN = ("first ,", "at first ,", "to begin with ,", "early on ,", "")
MID_CONN = ("then ,", "next ,", "after that ,", "later ,", "afterwards ,")
LAST_CONN = ("finally ,", "in the end ,", "at the end ,", "eventually ,", "then ,")
ONLY_CONN = ("", "at some point ,", "later ,", "then ,")
EVENT_JOIN = ("sentences", "and then")
SUDDEN = ("", "suddenly")
APPEAR_TAIL = ("on the screen", "in the scene")
VANISH_TAIL = ("from view", "from the screen", "from the scene")
STOP_ADV = ("", "suddenly", "abruptly")
STOP_TAIL = ("moving",)
MEET_ADV = ("", "eventually")
MEET_TAIL = ("each other",)
NOBODY = ("no object", "nothing", "none of the objects")
INTRO_POS = ("start", "end")

#: Every option tuple above; the tokenizer's vocabulary is built from these and the world's names.
PHRASE_SETS: tuple[tuple[str, ...], ...] = (
    NOUN_SG, NOUN_PL, THERE_SG, THERE_PL, INTRO_PREFIX, TOTAL_PREFIX, BG_PREP, BG_NOUN, MOVE_VERB,
    VERT_VERB, SIDE_PREP, VERT_ADV, MOVE_ADV, STILL_VERB, SCALE_ADV, SPIN_TAIL, MOTION_TAIL, SEE, VISIBLE,
    REL, ARTICLE, FIRST_CONN, MID_CONN, LAST_CONN, ONLY_CONN, SUDDEN, APPEAR_TAIL, VANISH_TAIL, STOP_ADV,
    STOP_TAIL, MEET_ADV, MEET_TAIL, NOBODY, ("an", "and", "then", "while", "while", CAPTION_PROMPT),
)


@dataclass(frozen=True)
class CaptionStyle:
    """A seeded preference over the grammar's wording choices.

    Attributes:
        name: the style's name (the dataset's ``style`` column).
        seed: seeds which option each choice point favours.
        sharpness: probability mass put on the favourite option (the rest is spread evenly);
            0 gives uniform choices, 1 always the favourite.
        optional: probability of including each optional clause; None draws it from the seed
            like any other choice.
        overrides: fixed favourite option per choice point (index into its options).
    """

    name: str
    seed: int = 0
    sharpness: float = 0.8
    optional: float | None = None
    overrides: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.sharpness <= 1.0:
            raise ConfigError(f"style sharpness must be in [0, 1], got {self.sharpness}")
        if self.optional is not None and not 0.0 <= self.optional <= 1.0:
            raise ConfigError(f"style optional must be in [0, 1], got {self.optional}")

    def weights(self, point: str, n: int) -> np.ndarray:
        """Probabilities ``(n,) float64`` of the options of choice point ``point``."""
        if point.startswith("opt:") and self.optional is not None and n == 2:
            return np.array([self.optional, 1.0 - self.optional])
        if self.sharpness == 0.0 or n == 1:
            return np.full(n, 1.0 / n)
        if point in self.overrides:
            fav = self.overrides[point] % n
        else:
            # crc32, not hash(): the favourite must be the same in every process and run.
            fav = zlib.crc32(f"{self.seed}:{point}:{n}".encode()) % n
        w = np.full(n, (1.0 - self.sharpness) / n)
        w[fav] += self.sharpness
        return w


#: Named styles. "uniform" has no preferences; alpha..delta are seeded styles of equal sharpness;
#: "terse" rarely adds optional clauses and joins clauses, "verbose" adds most optional clauses.
STYLES: dict[str, CaptionStyle] = {
    "uniform": CaptionStyle("uniform", seed=0, sharpness=0.0),
    "alpha": CaptionStyle("alpha", seed=1),
    "beta": CaptionStyle("beta", seed=2),
    "gamma": CaptionStyle("gamma", seed=3),
    "delta": CaptionStyle("delta", seed=4),
    "terse": CaptionStyle("terse", seed=5, optional=0.15, overrides={"join_objects": 1, "event_join": 1, "desc_template": 0}),
    "verbose": CaptionStyle("verbose", seed=6, optional=0.9, overrides={"join_objects": 0, "event_join": 0}),
}


def get_style(name: str) -> CaptionStyle:
    """A named style from :data:`STYLES`."""
    if name not in STYLES:
        raise ConfigError(f"unknown caption style {name!r}; choose from {sorted(STYLES)}")
    return STYLES[name]


def parse_style_mixture(spec: str) -> list[tuple[CaptionStyle, float]]:
    """Parse ``"alpha"``, ``"alpha,beta"`` or ``"alpha:3,beta:1"`` into (style, weight) pairs.

    Weights are normalised to sum to 1; a missing weight is 1.
    """
    out = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, w = part.partition(":")
        try:
            weight = float(w) if w else 1.0
        except ValueError:
            raise ConfigError(f"bad style weight in {part!r}") from None
        if not weight > 0:
            raise ConfigError(f"style weights must be positive, got {part!r}")
        out.append((get_style(name.strip()), weight))
    if not out:
        raise ConfigError(f"no caption style in {spec!r}")
    total = sum(w for _, w in out)
    return [(s, w / total) for s, w in out]


class Chooser:
    """Makes the wording choices of one caption: sampled from a style, or greedy (rng None)."""

    def __init__(self, style: CaptionStyle, rng: np.random.Generator | None) -> None:
        self.style = style
        self.rng = rng

    def pick(self, point: str, options: Sequence[T]) -> T:
        w = self.style.weights(point, len(options))
        if self.rng is None:
            return options[int(np.argmax(w))]
        return options[int(self.rng.choice(len(options), p=w))]

    def maybe(self, point: str) -> bool:
        """Whether to include the optional clause ``point``."""
        return self.pick("opt:" + point, (True, False))

    def words(self, point: str, options: Sequence[str]) -> list[str]:
        return self.pick(point, options).split()


@dataclass(frozen=True)
class Caption:
    """A caption with its exact per-piece labels.

    Attributes:
        text: the caption.
        pieces: the text split into words and punctuation; non-initial words keep their leading
            space, so ``"".join(pieces) == text`` and each piece is one SynthVid token.
        labels: label of each piece (:data:`LABELS`).
        style: name of the style it was written in.
    """

    text: str
    pieces: tuple[str, ...]
    labels: tuple[str, ...]
    style: str


def _article(next_word: str, definite: bool) -> str:
    if definite:
        return "the"
    return "an" if next_word[0] in "aeiou" else "a"


def _describe_motion(ch: Chooser, obj: dict, has_stop: bool) -> list[str]:
    m = obj["motion"]
    if m in ("left", "right"):
        out = ch.words("move_adv", MOVE_ADV) + ch.words("move_verb", MOVE_VERB) + ch.words("side_prep", SIDE_PREP) + [m]
    elif m in ("up", "down"):
        out = ch.words("move_adv", MOVE_ADV) + ch.words("vert_verb", VERT_VERB) + ch.words("vert_adv", VERT_ADV) + [m]
    elif m == "diagonally":
        out = ch.words("move_adv", MOVE_ADV) + ch.words("move_verb", MOVE_VERB) + [m]
    elif m == "still":
        out = ch.words("still_verb", STILL_VERB) + [m]
    elif m in ("grows", "shrinks"):
        out = ch.words("scale_adv", SCALE_ADV) + [m]
    else:  # rotates
        out = ch.words("scale_adv", SCALE_ADV) + [m]
        if ch.maybe("spin_tail"):
            out += ch.words("spin_tail", SPIN_TAIL)
    # "the whole time" would be wrong for an object that stops or meets another one.
    if not has_stop and ch.maybe("motion_tail"):
        out += ch.words("motion_tail", MOTION_TAIL)
    return out


def _np_indef(ch: Chooser, obj: dict) -> list[str]:
    core = ([obj["size"]] if ch.maybe("size") else []) + [obj["colour"], obj["shape"]]
    return [_article(core[0], ch.pick("article", ARTICLE) == "the")] + core


def _np_def(obj: dict) -> list[str]:
    return ["the", obj["colour"], obj["shape"]]


def _describe_object(ch: Chooser, obj: dict, has_stop: bool) -> tuple[list[str], bool]:
    """Words of one object's description (no final period) and whether it is a plain clause."""
    t = ch.pick("desc_template", DESC_TEMPLATE)
    np_ = _np_indef(ch, obj)
    if t == "there":  # "there is the red circle" reads wrong: existential takes "a"
        np_[0] = _article(np_[1], False)
    vp = _describe_motion(ch, obj, has_stop)
    if t == "plain":
        return np_ + vp, True
    if t == "there":
        return ["there", "is"] + np_ + ch.words("rel", REL) + vp, False
    if t == "see":
        return ch.words("see", SEE) + np_ + [","] + ["which"] + vp, False
    return np_ + ch.words("visible", VISIBLE) + vp, True


def _describe_event(ch: Chooser, ev: dict, objs: list[dict]) -> list[str]:
    o = objs[ev["objects"][0]]
    kind = ev["type"]
    if kind == "appears":
        out = _np_def(o) + ch.words("sudden", SUDDEN) + ["appears"]
        if ch.maybe("appear_tail"):
            out += ch.words("appear_tail", APPEAR_TAIL)
    elif kind == "disappears":
        out = _np_def(o) + ch.words("sudden", SUDDEN) + ["disappears"]
        if ch.maybe("vanish_tail"):
            out += ch.words("vanish_tail", VANISH_TAIL)
    elif kind == "stops":
        out = _np_def(o) + ch.words("stop_adv", STOP_ADV) + ["stops"]
        if ch.maybe("stop_tail"):
            out += STOP_TAIL[0].split()
    elif kind == "turns":
        out = _np_def(o) + ch.words("sudden", SUDDEN) + ["turns", ev["colour"]]
    else:  # meet
        other = objs[ev["objects"][1]]
        out = _np_def(o) + ["and"] + _np_def(other) + ch.words("meet_adv", MEET_ADV) + ["meet"]
        if ch.maybe("meet_tail"):
            out += MEET_TAIL[0].split()
    return out


def _intro(ch: Chooser, facts: dict) -> list[str]:
    n = facts["count"]
    noun = ch.words("noun", NOUN_SG if n == 1 else NOUN_PL)
    lead = ch.words("there", THERE_SG if n == 1 else THERE_PL)
    out = lead + [COUNT_WORDS[n]] + noun
    if lead[0] == "there" and ch.maybe("intro_prefix"):
        out = ch.words("intro_prefix", INTRO_PREFIX) + out
    if ch.maybe("background"):
        out += ch.words("bg_prep", BG_PREP) + [facts["background"]] + ch.words("bg_noun", BG_NOUN)
    return out


def _build(facts: dict, ch: Chooser) -> list[list[str]]:
    objs = facts["objects"]
    events = facts["events"]
    stopped = {i for e in events if e["type"] in ("stops", "meet") for i in e["objects"]}
    sentences: list[list[str]] = []

    intro_pos = ch.pick("intro_pos", INTRO_POS) if ch.maybe("intro") else None
    if intro_pos == "start":
        sentences.append(_intro(ch, facts) + ["."])

    order = ch.pick("object_order", OBJECT_ORDER)
    ids = list(range(len(objs)))
    if order == "reverse":
        ids.reverse()
    elif order == "size":
        ids.sort(key=lambda i: -SIZES[objs[i]["size"]])
    clauses = [_describe_object(ch, objs[i], i in stopped) for i in ids]
    join = ch.pick("join_objects", JOIN_OBJECTS)
    k = 0
    while k < len(clauses):
        words, plain = clauses[k]
        if join != "sentences" and k + 1 < len(clauses) and plain and clauses[k + 1][1]:
            nxt = clauses[k + 1][0]
            joiner = [",", "and"] if join == "and" else ["while"]
            sentences.append(words + joiner + nxt + ["."])
            k += 2
        else:
            sentences.append(words + ["."])
            k += 1

    # Events always in time order: the judge reads event order from text order.
    ev_join = ch.pick("event_join", EVENT_JOIN)
    pending: list[str] | None = None
    for j, ev in enumerate(events):
        if len(events) == 1:
            conn = ch.words("only_conn", ONLY_CONN)
        elif j == 0:
            conn = ch.words("first_conn", FIRST_CONN)
        elif j == len(events) - 1:
            conn = ch.words("last_conn", LAST_CONN)
        else:
            conn = ch.words("mid_conn", MID_CONN)
        clause = _describe_event(ch, ev, objs)
        if pending is not None and ev_join == "and then":
            sentences.append(pending + [",", "and", "then"] + clause + ["."])
            pending = None
        elif ev_join == "and then" and j + 1 < len(events):
            if pending is not None:
                sentences.append(pending + ["."])
            pending = conn + clause
        else:
            if pending is not None:
                sentences.append(pending + ["."])
                pending = None
            sentences.append(conn + clause + ["."])
    if pending is not None:
        sentences.append(pending + ["."])

    types = {e["type"] for e in events}
    absent = [t for t in ("disappears", "appears", "stops") if t not in types]
    if absent and ch.maybe("negation"):
        sentences.append(ch.words("nobody", NOBODY) + [absent[0], "."])

    if intro_pos == "end":
        sentences.append(ch.words("total_prefix", TOTAL_PREFIX) + _intro(ch, facts) + ["."])
    return sentences


def render_words(sentences: list[list[str]]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Join sentences of words into pieces (capitalised sentence starts, spaces) and labels."""
    pieces: list[str] = []
    labels: list[str] = []
    for sent in sentences:
        for j, w in enumerate(sent):
            txt = w[0].upper() + w[1:] if j == 0 else w
            pieces.append(txt if (w in PUNCT or not pieces) else " " + txt)
            labels.append(word_label(w))
    return tuple(pieces), tuple(labels)


def _caption(facts: dict, ch: Chooser) -> Caption:
    pieces, labels = render_words(_build(facts, ch))
    return Caption("".join(pieces), pieces, labels, ch.style.name)


def sample_caption(facts: dict, rng: np.random.Generator, style: CaptionStyle | str = "uniform") -> Caption:
    """A caption of ``facts`` with wording drawn from ``style``."""
    style = get_style(style) if isinstance(style, str) else style
    return _caption(facts, Chooser(style, rng))


def greedy_caption(facts: dict, style: CaptionStyle | str) -> Caption:
    """The caption that takes ``style``'s favourite option at every choice point."""
    style = get_style(style) if isinstance(style, str) else style
    return _caption(facts, Chooser(style, None))
