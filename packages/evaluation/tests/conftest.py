"""Shared fixtures of the evaluation tests."""

from __future__ import annotations

import pytest

from vidspec.evaluation.synthvid import SynthVidConfig, generate_synthvid


@pytest.fixture(scope="module")
def synthvid(tmp_path_factory):
    """Two easy 64x64 SynthVid videos in a validation split, one MCQ each (a module may override it)."""
    out = tmp_path_factory.mktemp("sv") / "sv"
    return generate_synthvid(out, SynthVidConfig(num_videos=2, seed=0, preset="easy", size="64x64",
                                                 split="validation", mcq_per_video=1, open_per_video=0),
                             progress=False)


@pytest.fixture
def no_decoding(monkeypatch):
    """Make any model load or decode in the runner fail the test (a resumed run must do neither)."""
    from vidspec.evaluation import runner

    def boom(*a, **k):
        raise AssertionError("a finished (sample, method) was decoded again")

    monkeypatch.setattr(runner, "decode_sample", boom)
    monkeypatch.setattr(runner, "load_models", boom)
