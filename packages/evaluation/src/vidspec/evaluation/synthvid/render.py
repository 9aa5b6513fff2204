"""Render a SynthVid scene frame by frame with numpy and encode it as H.264 mp4 with PyAV.

Shapes are polygons (a circle is a distance test) filled by an even-odd crossing test over the
pixel centres of the object's bounding box, so a frame costs O(objects x box area).

Usage::

    frames = render_video(scene)                 # (T, H, W, 3) uint8
    encode_mp4(frames, "clip.mp4", fps=scene.config.fps, crf=18)
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np

from vidspec.evaluation.synthvid.world import BACKGROUNDS, COLOURS, Scene, SceneObject, object_state


def _polygon(shape: str, r: float, angle: float) -> np.ndarray | None:
    """Vertices ``(N, 2)`` of ``shape`` with circumradius ``r`` about the origin, or None for a circle."""
    if shape == "circle":
        return None
    if shape == "star":
        k = np.arange(10)
        rad = np.where(k % 2 == 0, r, 0.45 * r)
        a = angle + k * math.pi / 5
        return np.stack([rad * np.cos(a), rad * np.sin(a)], axis=1)
    if shape == "cross":
        w = 0.35 * r
        pts = np.array(
            [(w, r), (w, w), (r, w), (r, -w), (w, -w), (w, -r), (-w, -r), (-w, -w), (-r, -w), (-r, w), (-w, w), (-w, r)]
        )
        c, s = math.cos(angle), math.sin(angle)
        return pts @ np.array([[c, s], [-s, c]])
    if shape == "diamond":
        # A rhombus, its diagonals 1.45 r and 0.85 r from the centre (area 2.47 r^2, near the square's 2.65 r^2).
        # Objects are drawn at any rotation, so a diamond must differ from a square in more than its angle: up to
        # world version 1 it was a square turned by 45 degrees, and the two were one shape to a trained tower.
        a = angle - math.pi / 2 + np.arange(4) * math.pi / 2
        rad = r * np.array([1.45, 0.85, 1.45, 0.85])
        return np.stack([rad * np.cos(a), rad * np.sin(a)], axis=1)
    sides = {"triangle": 3, "square": 4, "pentagon": 5, "hexagon": 6}[shape]
    # Circumradii are scaled so each area is close to the circle's, which keeps "large" looking large for every shape.
    base = math.pi / 4 if shape == "square" else -math.pi / 2
    scale = {"triangle": 1.25, "square": 1.15}.get(shape, 1.05)
    a = angle + base + np.arange(sides) * 2 * math.pi / sides
    return np.stack([scale * r * np.cos(a), scale * r * np.sin(a)], axis=1)


def _fill(frame: np.ndarray, shape: str, x: float, y: float, r: float, angle: float, rgb: np.ndarray) -> None:
    H, W = frame.shape[:2]
    poly = _polygon(shape, r, angle)
    ext = r if poly is None else float(np.abs(poly).max())
    x0, x1 = max(int(math.floor(x - ext)), 0), min(int(math.ceil(x + ext)) + 1, W)
    y0, y1 = max(int(math.floor(y - ext)), 0), min(int(math.ceil(y + ext)) + 1, H)
    if x0 >= x1 or y0 >= y1:
        return
    px = np.arange(x0, x1) + 0.5 - x
    py = (np.arange(y0, y1) + 0.5 - y)[:, None]
    if poly is None:
        mask = px[None, :] ** 2 + py**2 <= r * r
    else:
        mask = np.zeros((y1 - y0, x1 - x0), dtype=bool)
        n = len(poly)
        for i in range(n):
            (ax, ay), (bx, by) = poly[i], poly[(i + 1) % n]
            if ay == by:
                continue
            crosses = (ay > py) != (by > py)
            xs = (bx - ax) * (py - ay) / (by - ay) + ax
            mask ^= crosses & (px[None, :] < xs)
    frame[y0:y1, x0:x1][mask] = rgb


def render_frame(scene: Scene, t: int) -> np.ndarray:
    """Frame ``t`` of ``scene`` as ``(H, W, 3) uint8``; objects are drawn in id order."""
    c = scene.config
    frame = np.empty((c.height, c.width, 3), dtype=np.uint8)
    frame[:] = BACKGROUNDS[scene.background]
    bg = np.array(BACKGROUNDS[scene.background], dtype=np.int16)
    for sx, sy, sr, shade in scene.distractors:
        _fill(frame, "circle", sx, sy, sr, 0.0, np.clip(bg + shade, 0, 255).astype(np.uint8))
    for obj in scene.objects:
        _draw(frame, obj, t)
    return frame


def _draw(frame: np.ndarray, obj: SceneObject, t: int) -> None:
    visible, x, y, r, angle, colour = object_state(obj, t)
    if visible and r > 0.5:
        _fill(frame, obj.shape, x, y, r, angle, np.array(COLOURS[colour], dtype=np.uint8))


def render_video(scene: Scene) -> np.ndarray:
    """All frames of ``scene``: ``(T, H, W, 3) uint8``."""
    return np.stack([render_frame(scene, t) for t in range(scene.config.num_frames)])


def rgb_to_yuv420p(frame: np.ndarray) -> np.ndarray:
    """``(H, W, 3) uint8`` RGB to a planar yuv420p buffer ``(H * 3 // 2, W) uint8`` (BT.601, limited range).

    Done here rather than by libswscale: swscale's SIMD paths gave different bytes for the same
    frame once in a few runs, which broke the byte-identical guarantee.
    """
    f = frame.astype(np.float32)
    r, g, b = f[..., 0], f[..., 1], f[..., 2]
    y = 16.0 + 0.256788 * r + 0.504129 * g + 0.097906 * b
    u = 128.0 - 0.148223 * r - 0.290993 * g + 0.439216 * b
    v = 128.0 + 0.439216 * r - 0.367788 * g - 0.071427 * b
    H, W = y.shape

    def down(c: np.ndarray) -> np.ndarray:  # 2x2 box average for the chroma planes
        return c.reshape(H // 2, 2, W // 2, 2).mean(axis=(1, 3))

    planes = [y, down(u), down(v)]
    out = np.empty((H * 3 // 2, W), dtype=np.uint8)
    out[:H] = np.clip(np.rint(planes[0]), 0, 255)
    # u and v are each (H/2, W/2): stored row-major one after the other in the (H/2, W) tail.
    out[H:].reshape(-1)[: H * W // 4] = np.clip(np.rint(planes[1]), 0, 255).reshape(-1)
    out[H:].reshape(-1)[H * W // 4 :] = np.clip(np.rint(planes[2]), 0, 255).reshape(-1)
    return out


def encode_mp4(frames: np.ndarray, path: str | Path, fps: float, crf: int = 18) -> None:
    """Write ``frames`` ``(T, H, W, 3) uint8`` RGB as an H.264 (yuv420p) mp4 file.

    x264 runs single-threaded with fixed options, so the same frames give the same bytes: the
    dataset's determinism guarantee rests on this (parallelism comes from worker processes).
    Macroblock-tree rate control and its lookahead are off: with them, about one encode in a
    hundred in a long-lived process came out as another stream for the same frames (the first
    encode of a process never did), which made dataset builds differ now and then.
    """
    import av  # heavy; imported only when videos are written

    T, H, W, _ = frames.shape
    with av.open(str(path), mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=Fraction(fps).limit_denominator(1001))
        stream.width, stream.height = W, H
        stream.pix_fmt = "yuv420p"
        stream.options = {"crf": str(crf), "preset": "veryfast", "threads": "1", "bf": "0",
                          "x264-params": "mbtree=0:rc-lookahead=0"}
        for i, f in enumerate(frames):
            frame = _yuv_frame(av, f)
            frame.pts = i  # explicit timestamps: nothing left for the encoder to guess
            frame.time_base = Fraction(1, 1) / stream.codec_context.framerate
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def _yuv_frame(av, rgb: np.ndarray):
    """An ``av.VideoFrame`` whose planes, row padding included, are fully written.

    The padding at the end of each row is left uninitialised by PyAV, and x264 read it now and
    then: the same video came out with one byte different in a few runs out of a hundred.
    """
    H, W = rgb.shape[:2]
    yuv = rgb_to_yuv420p(rgb)
    tail = yuv[H:].reshape(-1)
    planes = (yuv[:H], tail[: H * W // 4].reshape(H // 2, W // 2), tail[H * W // 4 :].reshape(H // 2, W // 2))
    frame = av.VideoFrame(W, H, "yuv420p")
    for plane, data in zip(frame.planes, planes):
        buf = np.zeros((plane.height, plane.line_size), dtype=np.uint8)
        buf[:, : data.shape[1]] = data
        plane.update(buf)
    return frame
