"""Video input: read a file into a :class:`~vidspec.decoding.types.VideoClip`.

Two interchangeable backends sit behind the :class:`VideoReader` protocol: decord (fast random
access, the default) and PyAV (sequential decode, the fallback where decord is missing or fails
on a file). Both import their library lazily, so importing this module costs nothing.

Usage::

    from vidspec.decoding.video import read_video

    clip = read_video("talk.mp4", max_frames=16)                  # 16 frames spread uniformly
    clip = read_video("talk.mp4", fps=2.0, max_frames=64)          # ~2 frames per second, <= 64
    clip = read_video("talk.mp4", max_pixels=448 * 448, backend="pyav")
    clip.frames.shape                                              # (T, H, W, 3) uint8

Every problem a user can cause (missing, unreadable, corrupt or empty file, bad sampling
arguments) raises :class:`~vidspec.decoding.errors.VideoError` naming the file; no decord or
PyAV exception escapes.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np

from vidspec.decoding import interrupts
from vidspec.decoding.errors import VideoError
from vidspec.decoding.types import VideoClip

__all__ = [
    "DecodedFrames",
    "DecordReader",
    "AutoReader",
    "PyAVReader",
    "VideoInfo",
    "VideoReader",
    "fit_max_pixels",
    "fps_indices",
    "get_reader",
    "read_video",
    "resize_frames",
    "smart_resize",
    "uniform_indices",
]


class VideoInfo(NamedTuple):
    """What a backend reports about a video stream without decoding it.

    Attributes:
        num_frames: number of frames in the video stream (0 for an empty stream).
        fps: average frame rate; 0.0 when the container does not say.
    """

    num_frames: int
    fps: float


class DecodedFrames(NamedTuple):
    """Frames a backend decoded, in the order of the requested indices.

    Attributes:
        frames: ``(N, H, W, 3) uint8`` RGB frames at the video's own resolution.
        timestamps: presentation time in seconds of each frame, relative to the stream start,
            length N.
    """

    frames: np.ndarray
    timestamps: tuple[float, ...]


@runtime_checkable
class VideoReader(Protocol):
    """A video decoding backend. Stateless: each call opens and closes the file."""

    name: str

    def probe(self, path: str | os.PathLike[str]) -> VideoInfo:
        """Number of frames and frame rate of the first video stream of ``path``."""
        ...

    def read(self, path: str | os.PathLike[str], indices: Sequence[int]) -> DecodedFrames:
        """Decode the frames at ``indices`` (0-based, any order, repeats allowed)."""
        ...


# --------------------------------------------------------------------------------------------
# Checks shared by the backends


def _check_file(path: str | os.PathLike[str]) -> Path:
    """Reject paths that no decoder could open, before a backend gives a cryptic message."""
    p = Path(path)
    if not p.exists():
        raise VideoError(f"cannot read video {p}: file does not exist")
    if p.is_dir():
        raise VideoError(f"cannot read video {p}: it is a directory, not a video file")
    if not os.access(p, os.R_OK):
        raise VideoError(f"cannot read video {p}: permission denied")
    if p.stat().st_size == 0:
        raise VideoError(f"cannot read video {p}: the file is empty (0 bytes)")
    return p


def _check_indices(path: Path, indices: Sequence[int], num_frames: int | None) -> list[int]:
    idx = [int(i) for i in indices]
    if not idx:
        raise ValueError("indices must name at least one frame")
    if min(idx) < 0:
        raise ValueError(f"frame indices must be >= 0, got {min(idx)}")
    if num_frames is not None and max(idx) >= num_frames:
        raise VideoError(
            f"cannot read video {path}: frame {max(idx)} requested but the video has {num_frames} frames"
        )
    return idx


# --------------------------------------------------------------------------------------------
# Backends


@contextlib.contextmanager
def quiet_native_stderr():
    """Silence what native code (decord's bundled FFmpeg) writes straight to file descriptor 2.

    decord logs every unreadable file to stderr below Python, which would put noise above our
    one-line error. With ``VIDSPEC_DEBUG=1`` (``vidspec --debug``) the output is left alone.
    """
    if os.environ.get("VIDSPEC_DEBUG") == "1":
        yield
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real stderr (e.g. some embedded interpreters)
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


class DecordReader:
    """decord backend: seeks to the keyframe before each requested frame and decodes from there,
    so sparse sampling of a long video skips most of it."""

    name = "decord"

    def _open(self, path: Path):
        try:
            import decord  # lazy: decord is optional and has no wheel for some platforms
        except ImportError as e:
            raise VideoError(
                f"cannot read video {path}: the decord backend is not installed "
                f"(pip install decord, or use backend='pyav' or 'auto')"
            ) from e
        try:
            with quiet_native_stderr():
                return decord.VideoReader(str(path), ctx=decord.cpu(0))
        except Exception as e:  # decord raises DECORDError (or RuntimeError) for unreadable input
            raise VideoError(
                f"cannot read video {path}: not a video format FFmpeg knows, or the file is corrupt "
                f"or truncated ({_first_line(e, path)})"
            ) from e

    def probe(self, path: str | os.PathLike[str]) -> VideoInfo:
        interrupts.install()
        info = self._probe(_check_file(path))
        # decord's reader was freed on the way out (its __del__): a Ctrl-C that landed there was swallowed.
        interrupts.raise_if_interrupted()
        return info

    def _probe(self, p: Path) -> VideoInfo:
        vr = self._open(p)
        return VideoInfo(num_frames=len(vr), fps=float(vr.get_avg_fps() or 0.0))

    def read(self, path: str | os.PathLike[str], indices: Sequence[int]) -> DecodedFrames:
        interrupts.install()
        out = self._read(_check_file(path), indices)
        interrupts.raise_if_interrupted()  # as in probe: an interrupt swallowed by the reader's __del__
        return out

    def _read(self, p: Path, indices: Sequence[int]) -> DecodedFrames:
        vr = self._open(p)
        n = len(vr)
        if n == 0:
            raise VideoError(f"cannot read video {p}: the video has no frames")
        idx = _check_indices(p, indices, n)
        try:
            with quiet_native_stderr():
                batch = vr.get_batch(idx)
                ts = vr.get_frame_timestamp(idx)
        except Exception as e:  # corrupt packets surface here, not at open
            raise VideoError(
                f"cannot read video {p}: decoding failed, the file may be truncated "
                f"or corrupt ({_first_line(e, p)})"
            ) from e
        # get_batch returns a decord NDArray unless a global bridge (torch, ...) was set elsewhere
        frames = batch.asnumpy() if hasattr(batch, "asnumpy") else np.asarray(batch)
        frames = np.ascontiguousarray(frames, dtype=np.uint8)
        return DecodedFrames(frames, tuple(float(t) for t in np.asarray(ts)[:, 0]))


class PyAVReader:
    """PyAV backend: decodes the stream front to back and keeps only the requested frames.

    Memory stays at the size of the sampled frames however long the video is; time grows with
    the position of the last requested frame, since no seeking is done (seeking lands on
    keyframes and its accuracy depends on the container, sequential decoding is exact).
    """

    name = "pyav"

    def _open(self, path: Path):
        import av  # lazy, like decord

        try:
            container = av.open(str(path), mode="r")
        except Exception as e:  # av.FFmpegError subclasses: InvalidDataError, ...
            raise VideoError(
                f"cannot read video {path}: not a video format FFmpeg knows, or the file is corrupt "
                f"or truncated ({_first_line(e, path)})"
            ) from e
        if not container.streams.video:
            container.close()
            # The mp4 muxer drops a track without samples, so a 0-frame mp4 lands here too.
            raise VideoError(f"cannot read video {path}: the file contains no video frames (no video stream)")
        return container

    def probe(self, path: str | os.PathLike[str]) -> VideoInfo:
        import av

        p = _check_file(path)
        container = self._open(p)
        try:
            stream = container.streams.video[0]
            rate = stream.average_rate or stream.guessed_rate or stream.base_rate
            n = int(stream.frames or 0)
            if n == 0:
                # Some containers (mkv, webm, raw streams) do not store a frame count: count the
                # packets, which needs demuxing but no decoding.
                n = sum(1 for packet in container.demux(stream) if packet.size)
        except av.FFmpegError as e:
            raise VideoError(f"cannot read video {p}: the file is corrupt ({_first_line(e, p)})") from e
        finally:
            container.close()
        return VideoInfo(num_frames=n, fps=float(rate) if rate else 0.0)

    def read(self, path: str | os.PathLike[str], indices: Sequence[int]) -> DecodedFrames:
        import av

        p = _check_file(path)
        idx = _check_indices(p, indices, None)
        wanted = set(idx)
        last = max(idx)
        kept: dict[int, tuple[np.ndarray, float]] = {}
        container = self._open(p)
        decoded = 0
        try:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"  # frame + slice threads; output order is unchanged
            start = stream.start_time or 0
            tb = float(stream.time_base) if stream.time_base else 0.0
            rate = float(stream.average_rate or stream.guessed_rate or 0) or 0.0
            for i, frame in enumerate(container.decode(stream)):
                decoded = i + 1
                if i in wanted:
                    # Only sampled frames are converted to RGB and kept: the rest are dropped as
                    # YUV, so a long video does not fill memory.
                    if frame.pts is not None and tb:
                        t = (frame.pts - start) * tb
                    else:
                        t = i / rate if rate else 0.0
                    kept[i] = (frame.to_ndarray(format="rgb24"), float(t))
                if i >= last:
                    break
        except av.FFmpegError as e:
            raise VideoError(
                f"cannot read video {p}: decoding failed after {decoded} frames, the file "
                f"may be truncated or corrupt ({_first_line(e, p)})"
            ) from e
        finally:
            container.close()
        if decoded == 0:
            raise VideoError(f"cannot read video {p}: the video has no frames")
        if len(kept) < len(wanted):
            raise VideoError(
                f"cannot read video {p}: frame {last} requested but only {decoded} frames "
                f"could be decoded (is the file truncated?)"
            )
        frames = np.stack([kept[i][0] for i in idx])
        return DecodedFrames(frames, tuple(kept[i][1] for i in idx))


class AutoReader:
    """decord where it imports and can read the file, PyAV otherwise.

    A file decord failed on is remembered, so the probe-then-read sequence of
    :func:`read_video` does not try decord twice on it.

    Attributes:
        last_backend: name of the backend that served the latest call ("decord" or "pyav").
    """

    name = "auto"

    def __init__(self) -> None:
        self._decord = DecordReader()
        self._pyav = PyAVReader()
        self._decord_failed: set[str] = set()
        self.last_backend: str | None = None

    @staticmethod
    def decord_available() -> bool:
        """Whether decord imports (it has no wheel for some platforms)."""
        try:
            import decord  # noqa: F401
        except ImportError:  # also raised for a module set to None in sys.modules
            return False
        return True

    def _call(self, method: str, path: str | os.PathLike[str], *args):
        key = str(_check_file(path).resolve())  # path problems read the same from both backends
        if key not in self._decord_failed and self.decord_available():
            try:
                out = getattr(self._decord, method)(path, *args)
                self.last_backend = self._decord.name
                return out
            except VideoError as decord_error:
                self._decord_failed.add(key)
                try:
                    out = getattr(self._pyav, method)(path, *args)
                except VideoError as e:
                    # Both failed: PyAV's message is the more specific one; decord's stays as cause.
                    raise e from decord_error
                self.last_backend = self._pyav.name
                return out
        out = getattr(self._pyav, method)(path, *args)
        self.last_backend = self._pyav.name
        return out

    def probe(self, path: str | os.PathLike[str]) -> VideoInfo:
        return self._call("probe", path)

    def read(self, path: str | os.PathLike[str], indices: Sequence[int]) -> DecodedFrames:
        return self._call("read", path, indices)


_BACKENDS = {"auto": AutoReader, "decord": DecordReader, "pyav": PyAVReader}


def get_reader(backend: str = "auto") -> VideoReader:
    """A video reader by name.

    Args:
        backend: "auto" (decord, falling back to PyAV when decord is not importable or fails on
            a file), "decord" or "pyav".

    Raises:
        VideoError: unknown backend name.
    """
    try:
        return _BACKENDS[backend]()
    except KeyError:
        raise VideoError(f"unknown video backend {backend!r}; choose one of {sorted(_BACKENDS)}") from None


# --------------------------------------------------------------------------------------------
# Sampling


def uniform_indices(num_frames: int, num_samples: int) -> np.ndarray:
    """Indices of ``num_samples`` frames spread evenly over ``num_frames``.

    The video is cut into ``n = min(num_samples, num_frames)`` equal segments and the frame at
    the centre of each is taken: ``floor((i + 0.5) * num_frames / n)``. Centres rather than
    segment starts keep the first and last frames (often black or a title card) from being
    over-represented, and the result is deterministic. With ``num_samples >= num_frames`` every
    frame is returned once.

    Returns:
        ``(n,) int64`` strictly increasing indices.
    """
    if num_frames <= 0 or num_samples <= 0:
        raise ValueError(f"need num_frames > 0 and num_samples > 0, got {num_frames}, {num_samples}")
    n = min(num_samples, num_frames)
    return ((np.arange(n) + 0.5) * num_frames / n).astype(np.int64)


def fps_indices(num_frames: int, source_fps: float, fps: float, max_frames: int) -> np.ndarray:
    """Indices that sample about ``fps`` frames per second, at most ``max_frames`` of them.

    The count is ``round(duration * fps)`` (at least 1, at most ``num_frames`` and
    ``max_frames``), then placed like :func:`uniform_indices`. When the cap binds, the frames
    still cover the whole video, at a lower rate than asked.

    Returns:
        ``(n,) int64`` strictly increasing indices.
    """
    if source_fps <= 0 or fps <= 0:
        raise ValueError(f"need source_fps > 0 and fps > 0, got {source_fps}, {fps}")
    duration = num_frames / source_fps
    n = max(1, min(round(duration * fps), max_frames, num_frames))
    return uniform_indices(num_frames, n)


# --------------------------------------------------------------------------------------------
# Resizing


def fit_max_pixels(height: int, width: int, max_pixels: int) -> tuple[int, int]:
    """Largest size with the same aspect ratio and ``h * w <= max_pixels``; never upscales.

    Returns:
        (height, width), both >= 1.
    """
    if max_pixels < 1:
        raise ValueError(f"max_pixels must be >= 1, got {max_pixels}")
    if height * width <= max_pixels:
        return height, width
    scale = math.sqrt(max_pixels / (height * width))
    h = max(1, math.floor(height * scale))
    w = max(1, math.floor(width * scale))
    # float rounding can leave the product a pixel row over budget; trim the longer side
    while h * w > max_pixels:
        if h >= w:
            h -= 1
        else:
            w -= 1
    return h, w


def resize_frames(frames: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Resize every frame with PIL's bicubic filter.

    Args:
        frames: ``(T, H, W, 3) uint8``.
        size: target (height, width).

    Returns:
        ``(T, height, width, 3) uint8``; ``frames`` itself when the size already matches.
    """
    from PIL import Image

    h, w = int(size[0]), int(size[1])
    if h < 1 or w < 1:
        raise ValueError(f"target size must be positive, got {size}")
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ValueError(f"frames must be (T, H, W, 3) uint8, got {frames.shape} {frames.dtype}")
    if frames.shape[1:3] == (h, w):
        return frames
    out = np.empty((frames.shape[0], h, w, 3), dtype=np.uint8)
    for i, frame in enumerate(frames):
        # PIL takes (width, height)
        out[i] = np.asarray(Image.fromarray(frame).resize((w, h), Image.Resampling.BICUBIC))
    return out


def smart_resize(
    height: int,
    width: int,
    factor: int = 28,
    min_pixels: int = 56 * 56,
    max_pixels: int = 28 * 28 * 1280,
) -> tuple[int, int]:
    """The frame size Qwen2-VL / Qwen2.5-VL feed their vision encoder, for an input of ``(height, width)``.

    Same rule as transformers' ``qwen2_vl`` image processing, so that frames we resize give
    the same number of visual tokens as the official processor:

    1. round each side to the nearest multiple of ``factor`` (Python's round: ties to even);
    2. if that exceeds ``max_pixels``, scale both sides down by ``sqrt(h * w / max_pixels)``
       and round *down* to multiples of ``factor`` (at least ``factor``);
    3. else if it is below ``min_pixels``, scale both up by ``sqrt(min_pixels / (h * w))`` and
       round *up* to multiples of ``factor``.

    Args:
        height: input height in pixels.
        width: input width in pixels.
        factor: patch size times spatial merge size (14 * 2 for Qwen2-VL).
        min_pixels: lower pixel budget.
        max_pixels: upper pixel budget.

    Returns:
        (height, width), multiples of ``factor``.

    Raises:
        ValueError: a non-positive side, or an aspect ratio above 200 (as transformers).
    """
    if height <= 0 or width <= 0:
        raise ValueError(f"height and width must be positive, got {height}x{width}")
    aspect = max(height, width) / min(height, width)
    if aspect > 200:
        raise ValueError(f"absolute aspect ratio must be smaller than 200, got {aspect}")
    h = factor * round(height / factor)
    w = factor * round(width / factor)
    if h * w > max_pixels:
        # The operations are kept in transformers' order (divide by beta, then by factor) so
        # that floating point rounding gives the same integers at the edges.
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, factor * math.floor(height / beta / factor))
        w = max(factor, factor * math.floor(width / beta / factor))
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = factor * math.ceil(height * beta / factor)
        w = factor * math.ceil(width * beta / factor)
    return h, w


# --------------------------------------------------------------------------------------------
# Entry point


def read_video(
    path: str | os.PathLike[str],
    *,
    max_frames: int = 16,
    fps: float | None = None,
    max_pixels: int | None = None,
    backend: str = "auto",
) -> VideoClip:
    """Read and sample a video file.

    Args:
        path: the video file (anything FFmpeg reads: mp4, mkv, webm, avi, ...).
        max_frames: at most this many frames. Without ``fps``, exactly
            ``min(max_frames, num_frames)`` frames at the centres of equal segments
            (:func:`uniform_indices`).
        fps: if given, sample about this many frames per second of video instead, still at most
            ``max_frames`` (:func:`fps_indices`).
        max_pixels: if given, downscale frames (bicubic, aspect ratio kept) so that
            ``H * W <= max_pixels``. Frames are never upscaled.
        backend: "auto", "decord" or "pyav" (see :func:`get_reader`).

    Returns:
        A :class:`VideoClip` with ``(T, H, W, 3) uint8`` frames, the sampled sequence's frame rate
        (``source_fps * T / source_num_frames``), each frame's timestamp in seconds, and the
        source's frame count and rate.

    Raises:
        VideoError: the file is missing, a directory, not a video, corrupt, truncated or empty,
            or an argument is out of range.
    """
    if isinstance(max_frames, bool) or not isinstance(max_frames, int) or max_frames <= 0:
        raise VideoError(
            f"cannot read video {path}: max_frames must be a positive integer, got {max_frames!r}"
        )
    if fps is not None and not (isinstance(fps, int | float) and math.isfinite(fps) and fps > 0):
        raise VideoError(f"cannot read video {path}: fps must be a positive number, got {fps!r}")
    if max_pixels is not None and (not isinstance(max_pixels, int) or max_pixels < 1):
        raise VideoError(
            f"cannot read video {path}: max_pixels must be a positive integer, got {max_pixels!r}"
        )

    reader = get_reader(backend)
    info = reader.probe(path)
    if info.num_frames <= 0:
        raise VideoError(f"cannot read video {path}: the video has no frames")
    if fps is None:
        indices = uniform_indices(info.num_frames, max_frames)
    else:
        if info.fps <= 0:
            raise VideoError(
                f"cannot read video {path}: the file gives no frame rate, so fps sampling "
                f"is impossible; use max_frames alone"
            )
        indices = fps_indices(info.num_frames, info.fps, fps, max_frames)

    frames, timestamps = reader.read(path, indices.tolist())
    if max_pixels is not None:
        frames = resize_frames(frames, fit_max_pixels(frames.shape[1], frames.shape[2], max_pixels))
    sampled_fps = info.fps * len(indices) / info.num_frames
    return VideoClip(
        frames=frames,
        fps=sampled_fps,
        source=str(path),
        timestamps=timestamps,
        source_num_frames=info.num_frames,
        source_fps=info.fps,
    )


def _first_line(e: BaseException, path: Path | None = None) -> str:
    """The gist of a backend's exception message, for the end of a VideoError's message.

    PyAV's errors carry FFmpeg's own text in ``strerror``. decord's messages start with a log
    prefix (``[07:21:00] /src/video_reader.cc:151: ``), may repeat it inside ("Check failed:
    ... ERROR ...") and end with a C++ stack trace: keep the first line without the prefix, and
    only the part after ERROR where there is one. The path is dropped: the message names it
    already.
    """
    strerror = getattr(e, "strerror", None)
    if isinstance(strerror, str) and strerror:
        return strerror
    lines = str(e).strip().splitlines()
    text = lines[0] if lines else ""
    text = re.sub(r"^\[[0-9:]+\] \S+:\d+: ", "", text)
    if "ERROR " in text:
        text = text.split("ERROR ", 1)[1]
    if path is not None:
        text = text.replace(str(path), "the file").rstrip(".")
    return text.strip() or type(e).__name__
