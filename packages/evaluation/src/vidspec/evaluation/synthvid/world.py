"""The SynthVid world: what a scene contains and how it is sampled.

A scene is a background, 1-5 coloured shapes with a size and a motion, and a few timed events
(appears, disappears, stops, turns another colour, two objects meet). :func:`sample_scene` draws
one from a :class:`WorldConfig` and a numpy ``Generator``; :meth:`Scene.facts` is the ground truth
as a JSON-ready dict, and :func:`object_state` says where each object is at a frame, which the
renderer and the tests share.

Coordinates are pixels with the origin at the top-left corner; "up" means decreasing y.

Usage::

    rng = np.random.default_rng(0)
    scene = sample_scene(rng, PRESETS["easy"])
    facts = scene.facts()
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from vidspec.decoding.errors import ConfigError

#: Object colours and their RGB values; distinct hues so that H.264 chroma loss keeps them apart.
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 170, 40),
    "blue": (40, 70, 230),
    "yellow": (240, 220, 30),
    "orange": (245, 130, 20),
    "purple": (140, 50, 200),
    "pink": (250, 120, 190),
    "cyan": (30, 210, 220),
    "white": (245, 245, 245),
    "brown": (130, 80, 30),
}

#: Background colours; disjoint from :data:`COLOURS` so an object never blends into the background.
BACKGROUNDS: dict[str, tuple[int, int, int]] = {
    "black": (15, 15, 15),
    "gray": (105, 105, 105),
    "beige": (200, 185, 150),
}

#: The world's version, recorded in every scene's facts. 2: the diamond is a rhombus; in version 1 it was
#: a square turned by 45 degrees, which the random rotation every object gets made indistinguishable from a square.
WORLD_VERSION = 2

#: Shapes the renderer draws (all contain their centre, which the pixel tests rely on).
SHAPES: tuple[str, ...] = ("circle", "square", "triangle", "star", "diamond", "hexagon", "pentagon", "cross")

#: Size classes and their radius as a fraction of the shorter frame side (before ``size_scale``).
SIZES: dict[str, float] = {"small": 0.08, "medium": 0.12, "large": 0.17}

#: Motions; the first five translate the object, the rest keep its centre fixed.
MOTIONS: tuple[str, ...] = ("left", "right", "up", "down", "diagonally", "still", "grows", "shrinks", "rotates")
TRANSLATIONS: tuple[str, ...] = ("left", "right", "up", "down", "diagonally")

#: Event types. "turns" is a colour change, "meet" involves two objects.
EVENTS: tuple[str, ...] = ("appears", "disappears", "stops", "turns", "meet")

_DIRECTIONS = {"left": (-1.0, 0.0), "right": (1.0, 0.0), "up": (0.0, -1.0), "down": (0.0, 1.0)}
# Relative radius change per frame of growing/shrinking objects and angle per frame of rotating ones.
_GROWTH = 0.04
_SPIN = math.radians(12.0)
# Smallest radius in pixels that still renders as a recognisable shape after H.264.
MIN_RADIUS_PX = 3.0


@dataclass(frozen=True)
class WorldConfig:
    """Difficulty knobs of the SynthVid world.

    Attributes:
        num_frames: frames per video.
        fps: frame rate of the encoded video.
        width: frame width in pixels (even, for H.264 yuv420p).
        height: frame height in pixels (even).
        min_objects: fewest objects in a scene (>= 1).
        max_objects: most objects in a scene (<= 5).
        sizes: size classes objects are drawn from (keys of ``SIZES``).
        size_scale: multiplies every size class's radius; > 1 makes objects easier to see.
        speed: displacement per frame of moving objects, as a fraction of the shorter side
            (jittered by +-20 percent, and reduced where the path would leave the frame).
        motions: motions objects are drawn from.
        events: event types scenes are drawn from (empty: no events).
        max_events: most events in a scene.
        shapes: shapes objects are drawn from.
        distractors: static background specks per video that are not objects (clutter).
        crf: x264 constant rate factor (lower is closer to the rendered frames).
    """

    num_frames: int = 16
    fps: float = 8.0
    width: int = 96
    height: int = 96
    min_objects: int = 1
    max_objects: int = 3
    sizes: tuple[str, ...] = ("small", "medium", "large")
    size_scale: float = 1.0
    speed: float = 0.03
    motions: tuple[str, ...] = MOTIONS
    events: tuple[str, ...] = EVENTS
    max_events: int = 2
    shapes: tuple[str, ...] = SHAPES
    distractors: int = 0
    crf: int = 18

    def __post_init__(self) -> None:
        if self.num_frames < 2:
            raise ConfigError(f"num_frames must be at least 2, got {self.num_frames}")
        if not self.fps > 0:
            raise ConfigError(f"fps must be positive, got {self.fps}")
        for name in ("width", "height"):
            v = getattr(self, name)
            if v < 16 or v > 4096 or v % 2:
                raise ConfigError(f"{name} must be an even number of pixels in [16, 4096], got {v}")
        if not 1 <= self.min_objects <= self.max_objects <= 5:
            raise ConfigError(
                f"need 1 <= min_objects <= max_objects <= 5, got {self.min_objects}..{self.max_objects}"
            )
        _check_subset("sizes", self.sizes, tuple(SIZES))
        _check_subset("motions", self.motions, MOTIONS)
        _check_subset("events", self.events, EVENTS, allow_empty=True)
        _check_subset("shapes", self.shapes, SHAPES)
        if self.max_events < 0:
            raise ConfigError(f"max_events must be >= 0, got {self.max_events}")
        if self.distractors < 0:
            raise ConfigError(f"distractors must be >= 0, got {self.distractors}")
        if not 0 <= self.crf <= 51:
            raise ConfigError(f"crf must be in [0, 51], got {self.crf}")
        if not self.speed >= 0:
            raise ConfigError(f"speed must be >= 0, got {self.speed}")
        if not self.size_scale > 0:
            raise ConfigError(f"size_scale must be positive, got {self.size_scale}")
        side = min(self.width, self.height)
        radii = [SIZES[s] * self.size_scale * side for s in self.sizes]
        if min(radii) < MIN_RADIUS_PX:
            raise ConfigError(
                f"objects of size {min(self.sizes, key=SIZES.get)!r} would be {min(radii):.1f} px in radius "
                f"at {self.width}x{self.height}; need >= {MIN_RADIUS_PX} (raise the size or size_scale)"
            )
        # Growing objects reach 1 + growth * frames times their radius; a diameter above the
        # shorter side cannot fit, so refuse configurations whose largest object does not fit.
        if 2 * max(radii) * 1.3 > side:
            raise ConfigError(
                f"objects of radius {max(radii):.1f} px do not fit in {self.width}x{self.height} "
                "(lower size_scale or raise the resolution)"
            )
        if len(self.colour_pool()) < self.max_objects:
            raise ConfigError("not enough colours for max_objects")

    def colour_pool(self) -> tuple[str, ...]:
        return tuple(COLOURS)

    @property
    def side(self) -> int:
        return min(self.width, self.height)


def _check_subset(name: str, values: tuple[str, ...], allowed: tuple[str, ...], allow_empty: bool = False) -> None:
    if not values and not allow_empty:
        raise ConfigError(f"{name} must not be empty")
    bad = [v for v in values if v not in allowed]
    if bad:
        raise ConfigError(f"unknown {name} {bad}; choose from {list(allowed)}")


#: Named difficulty presets. "easy" is meant to be learnable by a few-million-parameter model on a
#: CPU (two large objects at most, big moves, no timed events); "hard" stays hard.
PRESETS: dict[str, WorldConfig] = {
    "easy": WorldConfig(
        num_frames=8, fps=4.0, width=64, height=64, min_objects=1, max_objects=2, sizes=("medium", "large"),
        size_scale=1.4, speed=0.08, motions=("left", "right", "up", "down", "still"), events=(),
        max_events=0, shapes=("circle", "square", "triangle", "star", "cross", "diamond"),
    ),
    "default": WorldConfig(),
    "hard": WorldConfig(
        num_frames=32, fps=8.0, width=128, height=128, min_objects=3, max_objects=5, sizes=("small", "medium"),
        size_scale=0.9, speed=0.012, max_events=4, distractors=12,
    ),
    "long": WorldConfig(num_frames=256, fps=8.0, width=112, height=112, max_objects=4, speed=0.003, max_events=4),
}


def preset(name: str, **overrides) -> WorldConfig:
    """A named preset with some fields replaced (validated again)."""
    if name not in PRESETS:
        raise ConfigError(f"unknown SynthVid preset {name!r}; choose from {sorted(PRESETS)}")
    return replace(PRESETS[name], **overrides)


@dataclass(frozen=True)
class Track:
    """Where an object is drawn at each frame (pixels and radians, per frame).

    Position at frame t is ``(x0 + vx * min(t, stop), y0 + vy * min(t, stop))``; radius is
    ``r0 * (1 + growth * t)``; angle is ``angle0 + spin * t``.
    """

    x0: float
    y0: float
    vx: float
    vy: float
    stop: int
    r0: float
    growth: float
    angle0: float
    spin: float


@dataclass(frozen=True)
class SceneObject:
    """One object and its ground truth.

    Attributes:
        id: index in the scene (also the drawing order: later objects are drawn on top).
        shape: a name from :data:`SHAPES`.
        colour: colour when it is first visible.
        size: size class.
        motion: a name from :data:`MOTIONS`.
        track: geometry used for rendering.
        first: first visible frame.
        last: last visible frame (inclusive).
        new_colour: colour after a "turns" event, else None.
        turn_frame: frame of the colour change, else None.
    """

    id: int
    shape: str
    colour: str
    size: str
    motion: str
    track: Track
    first: int
    last: int
    new_colour: str | None = None
    turn_frame: int | None = None


@dataclass(frozen=True)
class Event:
    """A timed event. ``objects`` are object ids (two for "meet"); ``colour`` is the new colour of "turns"."""

    type: str
    frame: int
    objects: tuple[int, ...]
    colour: str | None = None


@dataclass(frozen=True)
class Scene:
    """A sampled scene: everything needed to render it and to state its facts."""

    config: WorldConfig
    background: str
    objects: tuple[SceneObject, ...]
    events: tuple[Event, ...]
    distractors: tuple[tuple[float, float, float, int], ...] = field(default=())

    def facts(self) -> dict:
        """Ground truth as a JSON-ready dict (the ``facts`` column of the dataset)."""
        c = self.config
        return {
            "version": WORLD_VERSION,
            "num_frames": c.num_frames,
            "fps": c.fps,
            "width": c.width,
            "height": c.height,
            "duration": round(c.num_frames / c.fps, 6),
            "background": self.background,
            "count": len(self.objects),
            "objects": [
                {
                    "id": o.id,
                    "shape": o.shape,
                    "colour": o.colour,
                    "size": o.size,
                    "motion": o.motion,
                    "first_frame": o.first,
                    "last_frame": o.last,
                    "new_colour": o.new_colour,
                    "turn_frame": o.turn_frame,
                    "track": {k: round(v, 6) if isinstance(v, float) else v for k, v in asdict(o.track).items()},
                }
                for o in self.objects
            ],
            "events": [
                {
                    "type": e.type,
                    "frame": e.frame,
                    "time": round(e.frame / c.fps, 6),
                    "objects": list(e.objects),
                    "colour": e.colour,
                }
                for e in self.events
            ],
        }


def object_state(obj: SceneObject, t: int) -> tuple[bool, float, float, float, float, str]:
    """(visible, x, y, radius, angle, colour) of ``obj`` at frame ``t``."""
    tr = obj.track
    ts = min(t, tr.stop)
    colour = obj.new_colour if obj.turn_frame is not None and t >= obj.turn_frame else obj.colour
    return (
        obj.first <= t <= obj.last,
        tr.x0 + tr.vx * ts,
        tr.y0 + tr.vy * ts,
        tr.r0 * (1.0 + tr.growth * t),
        tr.angle0 + tr.spin * t,
        colour,
    )


def sample_scene(rng: np.random.Generator, config: WorldConfig, max_tries: int = 50) -> Scene:
    """Draw one scene; resample until no two objects touch except those that meet by design."""
    for _ in range(max_tries):
        scene = _sample_once(rng, config)
        if not _accidental_contact(scene):
            return scene
    # Crowded configurations may touch somewhere in every draw; keep the last one. Contact that
    # is not a "meet" fact is then clutter the captions do not mention (see the dataset card).
    return scene


def _sample_once(rng: np.random.Generator, c: WorldConfig) -> Scene:
    W, H, side = c.width, c.height, c.side
    n = int(rng.integers(c.min_objects, c.max_objects + 1))
    background = str(rng.choice(list(BACKGROUNDS)))
    # Colours and shapes: (colour, shape) pairs are unique so "the red circle" names one object.
    used: set[tuple[str, str]] = set()
    specs = []
    for _ in range(n):
        while True:
            colour = str(rng.choice(c.colour_pool()))
            shape = str(rng.choice(c.shapes))
            if (colour, shape) not in used:
                used.add((colour, shape))
                break
        specs.append({"colour": colour, "shape": shape, "size": str(rng.choice(c.sizes))})
    for s in specs:
        motions = [m for m in c.motions if not (m == "rotates" and s["shape"] == "circle")]
        s["motion"] = str(rng.choice(motions))

    events = _sample_events(rng, c, specs)
    objects = []
    for i, s in enumerate(specs):
        objects.append(_place(rng, c, i, s))
    objects = _apply_meet(rng, c, objects, events)
    n_spk = c.distractors
    bg = np.array(BACKGROUNDS[background], dtype=float)
    specks = []
    for _ in range(n_spk):
        shade = 45 if bg.mean() < 128 else -45
        specks.append((float(rng.uniform(0, W)), float(rng.uniform(0, H)), float(rng.uniform(1.0, max(1.5, side / 48))), shade))
    return Scene(c, background, tuple(objects), tuple(sorted(events, key=lambda e: e.frame)), tuple(specks))


def _sample_events(rng: np.random.Generator, c: WorldConfig, specs: list[dict]) -> list[Event]:
    T = c.num_frames
    if not c.events or c.max_events == 0 or T < 5:
        return []
    k = int(rng.integers(0, c.max_events + 1))
    # Distinct frames keep the order of events unambiguous; frame 0 and the last frame are kept
    # free so that an appearing/disappearing object is seen on both sides of its event.
    frames = sorted(rng.choice(np.arange(2, T - 1), size=min(k, T - 3), replace=False).tolist())
    free = list(range(len(specs)))
    rng.shuffle(free)
    events: list[Event] = []
    for frame in frames:
        if not free:
            break
        kind = str(rng.choice(c.events))
        if kind == "meet":
            # Two translating or still objects are re-aimed at each other in _apply_meet.
            if len(free) < 2 or not set(TRANSLATIONS) & set(c.motions):
                continue
            a, b = free.pop(), free.pop()
            events.append(Event("meet", int(frame), (min(a, b), max(a, b))))
            continue
        i = free.pop()
        s = specs[i]
        if kind == "stops":
            if s["motion"] not in TRANSLATIONS:
                free.append(i)
                continue
            s["stop"] = int(frame)
            events.append(Event("stops", int(frame), (i,)))
        elif kind == "appears":
            s["first"] = int(frame)
            events.append(Event("appears", int(frame), (i,)))
        elif kind == "disappears":
            s["last"] = int(frame) - 1
            events.append(Event("disappears", int(frame), (i,)))
        elif kind == "turns":
            taken = {(t["colour"], t["shape"]) for t in specs} | {
                (t.get("new_colour"), t["shape"]) for t in specs
            }
            options = [col for col in c.colour_pool() if (col, s["shape"]) not in taken]
            if not options:
                free.append(i)
                continue
            s["new_colour"] = str(rng.choice(options))
            s["turn_frame"] = int(frame)
            events.append(Event("turns", int(frame), (i,), s["new_colour"]))
    return events


def _place(rng: np.random.Generator, c: WorldConfig, i: int, s: dict) -> SceneObject:
    T, W, H, side = c.num_frames, c.width, c.height, c.side
    r0 = SIZES[s["size"]] * c.size_scale * side * float(rng.uniform(0.9, 1.1))
    motion = s["motion"]
    growth = {"grows": _GROWTH, "shrinks": -_GROWTH}.get(motion, 0.0)
    # Keep growth bounded on long videos: the radius changes by at most 60 percent overall.
    if growth:
        growth = math.copysign(min(abs(growth), 0.6 / (T - 1)), growth)
    r_max = r0 * (1 + max(growth, 0.0) * (T - 1))
    stop = s.get("stop", T - 1)
    vx = vy = 0.0
    if motion in TRANSLATIONS:
        d = c.speed * side * float(rng.uniform(0.8, 1.2))
        if motion == "diagonally":
            ux, uy = (float(rng.choice([-1, 1])) / math.sqrt(2), float(rng.choice([-1, 1])) / math.sqrt(2))
        else:
            ux, uy = _DIRECTIONS[motion]
        # Shrink the speed where the full path would not fit inside the frame.
        span_x = W - 2 * r_max - 2
        span_y = H - 2 * r_max - 2
        limit = min(span_x / abs(ux) if ux else math.inf, span_y / abs(uy) if uy else math.inf)
        d = min(d, max(limit, 0.0) / max(stop, 1))
        vx, vy = ux * d, uy * d
    travel_x, travel_y = vx * stop, vy * stop
    lo_x, hi_x = r_max + 1 - min(travel_x, 0), W - r_max - 1 - max(travel_x, 0)
    lo_y, hi_y = r_max + 1 - min(travel_y, 0), H - r_max - 1 - max(travel_y, 0)
    x0 = float(rng.uniform(lo_x, hi_x)) if hi_x > lo_x else W / 2 - travel_x / 2
    y0 = float(rng.uniform(lo_y, hi_y)) if hi_y > lo_y else H / 2 - travel_y / 2
    spin = _SPIN * float(rng.choice([-1, 1])) if motion == "rotates" else 0.0
    track = Track(x0, y0, vx, vy, int(stop), r0, growth, float(rng.uniform(0, 2 * math.pi)), spin)
    return SceneObject(
        id=i, shape=s["shape"], colour=s["colour"], size=s["size"], motion=motion, track=track,
        first=s.get("first", 0), last=s.get("last", T - 1), new_colour=s.get("new_colour"),
        turn_frame=s.get("turn_frame"),
    )


def _apply_meet(rng: np.random.Generator, c: WorldConfig, objects: list[SceneObject], events: list[Event]) -> list[SceneObject]:
    """Re-aim the two objects of each "meet" event so that they first touch at the event frame."""
    W, H = c.width, c.height
    for e in events:
        if e.type != "meet":
            continue
        a, b = objects[e.objects[0]], objects[e.objects[1]]
        ra, rb = a.track.r0, b.track.r0
        tm = e.frame
        horizontal = bool(rng.integers(0, 2))
        extent = W if horizontal else H
        cross_extent = H if horizontal else W
        room = extent - 2 * ra - 2 * rb - 4
        # Each covers half the gap by frame tm, moving at most the configured speed.
        d = min(c.speed * c.side * 1.2, max(room, 0.0) / (2 * tm))
        gap = 2 * d * tm
        start_a = float(rng.uniform(ra + 2, max(ra + 2, extent - (ra + 2 * rb + gap + 2))))
        start_b = start_a + ra + rb + gap
        cross = float(rng.uniform(max(ra, rb) + 1, cross_extent - max(ra, rb) - 1))
        if horizontal:
            ta = replace(a.track, x0=start_a, y0=cross, vx=d, vy=0.0, stop=tm, growth=0.0, spin=0.0)
            tb = replace(b.track, x0=start_b, y0=cross, vx=-d, vy=0.0, stop=tm, growth=0.0, spin=0.0)
            ma, mb = "right", "left"
        else:
            ta = replace(a.track, x0=cross, y0=start_a, vx=0.0, vy=d, stop=tm, growth=0.0, spin=0.0)
            tb = replace(b.track, x0=cross, y0=start_b, vx=0.0, vy=-d, stop=tm, growth=0.0, spin=0.0)
            ma, mb = "down", "up"
        objects[a.id] = replace(a, track=ta, motion=ma)
        objects[b.id] = replace(b, track=tb, motion=mb)
    return objects


def _accidental_contact(scene: Scene) -> bool:
    """True when two objects overlap at some frame without a "meet" event between them."""
    meets = {e.objects for e in scene.events if e.type == "meet"}
    objs = scene.objects
    for t in range(scene.config.num_frames):
        states = [object_state(o, t) for o in objs]
        for i in range(len(objs)):
            for j in range(i + 1, len(objs)):
                si, sj = states[i], states[j]
                if not (si[0] and sj[0]):
                    continue
                dist = math.hypot(si[1] - sj[1], si[2] - sj[2])
                if (i, j) in meets:
                    # Meeting objects may touch from their meet frame on, never before.
                    meet_frame = next(e.frame for e in scene.events if e.objects == (i, j))
                    if t < meet_frame - 1 and dist < si[3] + sj[3]:
                        return True
                    continue
                if dist < si[3] + sj[3] + 1:
                    return True
    return False
