"""The fact judge: which claims a caption makes about a SynthVid video, and which are true.

The parser is rule-based over the SynthVid vocabulary, so it is exact on grammar captions and
degrades gracefully (fewer claims, never an exception) on free text. It reads:

- object mentions: ``[size] colour shape`` ("a large red circle"), ``colour object`` ("a red
  object"), and a bare ``shape`` ("the star") that resolves when the shape is unique;
- motions and events of the clause's subject (the first mention of the clause, else the subject of
  the previous clause, else "it" = the last subject): ``moves left``, ``stays still``, ``grows``,
  ``rotates``; ``appears``, ``disappears``, ``stops``, ``turns blue``, ``X and Y meet``;
- counts (``three objects``, ``two circles``) and the background (``a black background``);
- negations: ``no red object``, ``there is not a red circle``, ``nothing disappears``,
  ``the red circle does not move``;
- event order: the order in which (true) events are stated.

Objects are named by the colour they have when first seen. A claim about an object that does not
exist counts once (the object claim); what the caption says about that object is then unresolved,
not a second hallucination. So a caption with one colour swapped to a colour no such shape has
shows exactly one hallucination.

Usage::

    result = judge_caption("A red circle moves left.", facts)
    result.precision, result.recall, result.hallucinations
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from vidspec.evaluation.synthvid.grammar import COUNT_WORDS, PLURALS
from vidspec.evaluation.synthvid.world import BACKGROUNDS, COLOURS, SHAPES, SIZES

CATEGORIES = ("object", "size", "motion", "count", "background", "event", "order")

_ALL_COLOURS = {*COLOURS, *BACKGROUNDS}
_SHAPE_OF = {**{s: s for s in SHAPES}, **{p: s for s, p in PLURALS.items()}, "ball": "circle", "box": "square"}
_GENERIC = {"object", "objects", "shape", "shapes", "item", "items", "thing", "things"}
_NUMBERS = {w: i for i, w in enumerate(COUNT_WORDS)} | {str(i): i for i in range(10)} | {"single": 1}
_NEG = {"no", "not", "never", "nothing", "none", "neither", "nor", "doesn't", "don't", "isn't", "aren't", "cannot"}
_MOTION_WORDS = {
    "left": "left", "leftward": "left", "leftwards": "left",
    "right": "right", "rightward": "right", "rightwards": "right",
    "up": "up", "upward": "up", "upwards": "up",
    "down": "down", "downward": "down", "downwards": "down",
    "diagonally": "diagonally", "diagonal": "diagonally",
    "still": "still", "stationary": "still", "motionless": "still",
    "grows": "grows", "grow": "grows", "growing": "grows", "expands": "grows",
    "shrinks": "shrinks", "shrink": "shrinks", "shrinking": "shrinks",
    "rotates": "rotates", "rotate": "rotates", "rotating": "rotates", "spins": "rotates", "spinning": "rotates",
}
_MOVE_VERBS = {"move", "moves", "moving"}
_EVENT_WORDS = {
    "appears": "appears", "appear": "appears", "appearing": "appears",
    "disappears": "disappears", "disappear": "disappears", "vanishes": "disappears", "vanish": "disappears",
    "stops": "stops", "stop": "stops", "halts": "stops",
    "meet": "meet", "meets": "meet", "collide": "meet", "collides": "meet",
}
_TURN_WORDS = {"turns", "turn", "becomes", "become", "changes", "change"}
_SPLITTERS = {",", "while", "whereas", "but", "and", ";", ":"}
_NOT_MOTION_AFTER = {"corner", "side", "half", "edge", "of", "part"}


@dataclass(frozen=True)
class Claim:
    """One checkable statement found in a caption.

    Attributes:
        category: one of :data:`CATEGORIES`.
        text: a readable form, e.g. ``"red circle moves left"``.
        true: whether the facts support it.
        negated: a negative claim ("no red object").
        fact: key of the fact it states (for recall), or None for negative claims.
    """

    category: str
    text: str
    true: bool
    negated: bool = False
    fact: tuple | None = None


@dataclass
class JudgeResult:
    """Claims of one caption against one video's facts.

    ``precision`` is the share of claims that are true (1.0 when there are none), ``recall`` the
    share of facts stated by a true claim; both also per category.
    """

    claims: list[Claim]
    facts_total: dict[str, int]
    facts_found: dict[str, int] = field(default_factory=dict)

    @property
    def hallucinations(self) -> list[Claim]:
        return [c for c in self.claims if not c.true]

    @property
    def precision(self) -> float:
        return sum(c.true for c in self.claims) / len(self.claims) if self.claims else 1.0

    @property
    def recall(self) -> float:
        total = sum(self.facts_total.values())
        return sum(self.facts_found.values()) / total if total else 1.0

    def per_category(self) -> dict[str, dict[str, float | int]]:
        out = {}
        for cat in CATEGORIES:
            cl = [c for c in self.claims if c.category == cat]
            tot, found = self.facts_total.get(cat, 0), self.facts_found.get(cat, 0)
            out[cat] = {
                "claims": len(cl),
                "hallucinations": sum(not c.true for c in cl),
                "precision": sum(c.true for c in cl) / len(cl) if cl else 1.0,
                "facts": tot,
                "recall": found / tot if tot else 1.0,
            }
        return out

    def to_dict(self) -> dict:
        """JSON-ready summary (for per-sample result files)."""
        return {
            "precision": self.precision,
            "recall": self.recall,
            "num_claims": len(self.claims),
            "num_hallucinations": len(self.hallucinations),
            "hallucinations": [f"{c.category}: {c.text}" for c in self.hallucinations],
            "per_category": self.per_category(),
        }


@dataclass
class _Mention:
    start: int
    end: int
    obj: int | None  # resolved object id, None when no such object exists
    colour: str | None
    shape: str | None
    negated: bool = False


class _Judge:
    def __init__(self, facts: dict) -> None:
        self.facts = facts
        self.objs = facts["objects"]
        self.events = facts["events"]
        self.claims: list[Claim] = []
        self.event_seq: list[int] = []  # indices into facts["events"] of true event claims, in text order

    # -- helpers ---------------------------------------------------------------------------
    def add(self, category: str, text: str, true: bool, negated: bool = False, fact: tuple | None = None) -> None:
        self.claims.append(Claim(category, text, bool(true), negated, fact if true else None))

    def name(self, i: int) -> str:
        return f"{self.objs[i]['colour']} {self.objs[i]['shape']}"

    def find_object(self, colour: str | None, shape: str | None) -> int | None:
        hits = [
            o["id"] for o in self.objs
            if (colour is None or o["colour"] == colour) and (shape is None or o["shape"] == shape)
        ]
        return hits[0] if len(hits) == 1 else None

    # -- parsing ---------------------------------------------------------------------------
    def mentions(self, w: list[str], neg_before: list[bool]) -> list[_Mention]:
        out: list[_Mention] = []
        i = 0
        while i < len(w):
            word = w[i]
            size = None
            j = i
            if word in SIZES and j + 1 < len(w) and w[j + 1] in _ALL_COLOURS:
                size, j = word, j + 1
            if w[j] in _ALL_COLOURS and j + 1 < len(w) and (w[j + 1] in _SHAPE_OF or w[j + 1] in _GENERIC):
                colour, noun = w[j], w[j + 1]
                plural = noun in _GENERIC and noun.endswith("s") or noun in PLURALS.values()
                if plural:
                    # "two red circles": a count claim, handled by counts().
                    i = j + 2
                    continue
                shape = _SHAPE_OF.get(noun)
                neg = neg_before[i]
                self.object_claim(colour, shape, size, neg, out, i, j + 2)
                i = j + 2
                continue
            if word in _SHAPE_OF and word not in PLURALS.values() and not (i > 0 and _NUMBERS.get(w[i - 1])):
                shape = _SHAPE_OF[word]
                exists = any(o["shape"] == shape for o in self.objs)
                if neg_before[i]:
                    self.add("object", f"no {shape}", not exists, negated=True)
                elif not exists:
                    self.add("object", f"a {shape}", False)
                    out.append(_Mention(i, i + 1, None, None, shape))
                else:
                    out.append(_Mention(i, i + 1, self.find_object(None, shape), None, shape))
            i += 1
        return out

    def object_claim(self, colour, shape, size, neg, out, start, end) -> None:
        label = f"{colour} {shape or 'object'}"
        matches = [
            o for o in self.objs if o["colour"] == colour and (shape is None or o["shape"] == shape)
        ]
        if neg:
            self.add("object", f"no {label}", not matches, negated=True)
            return
        true = bool(matches)
        key = ("object", matches[0]["id"]) if true and shape else None
        self.add("object", label, true, fact=key)
        obj = matches[0]["id"] if len(matches) == 1 else None
        if true and size is not None and obj is not None:
            self.add("size", f"{size} {label}", self.objs[obj]["size"] == size, fact=("size", obj))
        out.append(_Mention(start, end, obj if true else None, colour, shape))

    def counts(self, w: list[str], neg_before: list[bool]) -> None:
        for i, word in enumerate(w):
            if word not in _NUMBERS or i + 1 >= len(w):
                continue
            n = _NUMBERS[word]
            j = i + 1
            colour = None
            if w[j] in _ALL_COLOURS and j + 1 < len(w):
                colour, j = w[j], j + 1
            noun = w[j]
            if noun in _GENERIC or noun in PLURALS.values() or (n == 1 and noun in _SHAPE_OF and colour is None):
                shape = _SHAPE_OF.get(noun)
                if noun in _GENERIC and colour is None:
                    actual = self.facts["count"]
                    self.add("count", f"{n} objects", (actual == n) != neg_before[i], neg_before[i], None if neg_before[i] else ("count",))
                    continue
                actual = sum(
                    1 for o in self.objs
                    if (shape is None or o["shape"] == shape) and (colour is None or o["colour"] == colour)
                )
                what = " ".join(x for x in (colour, shape or "objects") if x)
                self.add("count", f"{n} {what}", (actual == n) != neg_before[i], neg_before[i])

    def background(self, w: list[str]) -> None:
        for i, word in enumerate(w[:-1]):
            if word in _ALL_COLOURS and w[i + 1] in ("background", "backdrop"):
                self.add("background", f"{word} background", self.facts["background"] == word, fact=("background",))

    def clause(self, w: list[str], ms: list[_Mention], subject: _Mention | None, negated: bool) -> _Mention | None:
        """Motions and events of one clause; returns the clause's subject."""
        if ms:
            subject = ms[0]
        has_neg = negated
        # "no object disappears", "nothing stops": a negative claim about an event type.
        for k, word in enumerate(w):
            if word in _EVENT_WORDS or word in _TURN_WORDS:
                kind = _EVENT_WORDS.get(word, "turns")
                neg_here = has_neg or any(x in _NEG for x in w[:k])
                if not ms and neg_here and any(x in ("nothing", "no", "none") for x in w[:k]):
                    exists = any(e["type"] == kind for e in self.events)
                    self.add("event", f"nothing {kind}", not exists, negated=True)
                    continue
                if subject is None or subject.obj is None:
                    continue
                if kind == "meet":
                    others = [m for m in ms if m is not subject]
                    if not others or others[0].obj is None:
                        continue
                    pair = tuple(sorted((subject.obj, others[0].obj)))
                    self.event_claim("meet", pair, None, neg_here, f"{self.name(pair[0])} and {self.name(pair[1])} meet")
                    continue
                if kind == "turns":
                    new = next((x for x in w[k + 1 : k + 4] if x in _ALL_COLOURS), None)
                    if new is None:
                        continue
                    self.event_claim("turns", (subject.obj,), new, neg_here, f"{self.name(subject.obj)} turns {new}")
                    continue
                self.event_claim(kind, (subject.obj,), None, neg_here, f"{self.name(subject.obj)} {kind}")
            elif word in _MOTION_WORDS or word in _MOVE_VERBS:
                if subject is None or subject.obj is None:
                    continue
                if k + 1 < len(w) and w[k + 1] in _NOT_MOTION_AFTER:
                    continue
                if word in ("up",) and k > 0 and w[k - 1] in ("shows", "show", "showed"):
                    continue
                neg_here = has_neg or any(x in _NEG for x in w[:k])
                actual = self.objs[subject.obj]["motion"]
                name = self.name(subject.obj)
                if word in _MOVE_VERBS:
                    # Only "does not move" is a claim; "moves" alone is followed by its direction.
                    if neg_here:
                        self.add("motion", f"{name} does not move", actual not in ("left", "right", "up", "down", "diagonally"), negated=True)
                    continue
                m = _MOTION_WORDS[word]
                if neg_here:
                    self.add("motion", f"{name} does not {m}", actual != m, negated=True)
                else:
                    self.add("motion", f"{name} {m}", actual == m, fact=("motion", subject.obj))
        return subject

    def event_claim(self, kind: str, objs: tuple[int, ...], colour: str | None, neg: bool, text: str) -> None:
        idx = next(
            (i for i, e in enumerate(self.events)
             if e["type"] == kind and tuple(sorted(e["objects"])) == tuple(sorted(objs))
             and (colour is None or e["colour"] == colour)),
            None,
        )
        if neg:
            self.add("event", "not: " + text, idx is None, negated=True)
            return
        self.add("event", text, idx is not None, fact=("event", idx))
        if idx is not None:
            self.event_seq.append(idx)

    def order(self) -> None:
        for a, b in zip(self.event_seq, self.event_seq[1:]):
            ea, eb = self.events[a], self.events[b]
            true = ea["frame"] < eb["frame"]
            self.add("order", f"event {a} before event {b}", true, fact=("order", a, b) if b == a + 1 else None)


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z]+(?:'[a-z]+)?|[0-9]+|[.,;:!?\n]", text.lower())


def _split_sentences(words: list[str]) -> list[list[str]]:
    out, cur = [], []
    for w in words:
        if w in (".", "!", "?", "\n"):
            if cur:
                out.append(cur)
            cur = []
        else:
            cur.append(w)
    if cur:
        out.append(cur)
    return out


def judge_caption(caption: str, facts: dict) -> JudgeResult:
    """Check every claim of ``caption`` against ``facts`` (a SynthVid facts dict).

    Args:
        caption: any text; words outside the SynthVid vocabulary are ignored.
        facts: the video's facts (``Scene.facts()`` or ``json.loads`` of the ``facts`` column).

    Returns:
        The claims with their truth, and the facts counted for recall.
    """
    j = _Judge(facts)
    subject: _Mention | None = None
    for sent in _split_sentences(_words(caption or "")):
        # "no"/"not" right before a mention (or before its article) negates the mention itself;
        # inside a clause, a negation word negates the motions and events after it.
        neg_mention = [i > 0 and (sent[i - 1] in _NEG or (i > 1 and sent[i - 2] in _NEG and sent[i - 1] in ("a", "an", "any")))
                       for i in range(len(sent))]
        ms = j.mentions(sent, neg_mention)
        j.counts(sent, neg_mention)
        j.background(sent)
        # Split into clauses at commas and conjunctions, except "X and Y" joining two mentions.
        bounds = []
        starts = {m.start for m in ms}
        ends = {m.end for m in ms}
        for k, w in enumerate(sent):
            if w in _SPLITTERS:
                joins_two = w == "and" and k in ends and (k + 1 in starts or (k + 2 in starts and sent[k + 1] in ("the", "a", "an")))
                if not joins_two:
                    bounds.append(k)
        edges = [-1, *bounds, len(sent)]
        first_clause = True
        for a, b in zip(edges, edges[1:]):
            words = sent[a + 1 : b]
            if not words:
                continue
            clause_ms = [
                _Mention(m.start - a - 1, m.end - a - 1, m.obj, m.colour, m.shape) for m in ms if a < m.start < b
            ]
            carry = subject if (not first_clause or (words and words[0] in ("it", "which", "that"))) else None
            if not clause_ms and words[0] == "it":
                carry = subject
            subject = j.clause(words, clause_ms, carry, negated=False) or subject
            first_clause = False
    j.order()

    objs, events = facts["objects"], facts["events"]
    totals = {
        "object": len(objs), "size": len(objs), "motion": len(objs), "count": 1, "background": 1,
        "event": len(events), "order": max(len(events) - 1, 0),
    }
    found_keys = {c.fact for c in j.claims if c.true and c.fact is not None}
    found = {cat: sum(1 for k in found_keys if k[0] == cat) for cat in CATEGORIES}
    return JudgeResult(j.claims, totals, found)
