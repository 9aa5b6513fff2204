"""Shared fixtures: tiny models are built once per session (they are seeded, so identical)."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny():
    """A cache of loaded tiny models by name."""
    from vidspec.decoding.models import load_target

    cache: dict = {}

    def get(name: str):
        if name not in cache:
            cache[name] = load_target(name)
        return cache[name]

    return get


@pytest.fixture(scope="session")
def clip():
    """An 8-frame in-memory clip of noise with a moving bright square (56 x 84, not square)."""
    from vidspec.decoding.types import VideoClip

    rng = np.random.default_rng(0)
    frames = rng.integers(0, 80, (8, 56, 84, 3), dtype=np.uint8)
    for t in range(8):
        frames[t, 10:30, 5 + 6 * t: 25 + 6 * t] = (250, 40, 40)
    return VideoClip(frames=frames, fps=4.0, source="memory", timestamps=tuple(t / 4 for t in range(8)))


@pytest.fixture(scope="module")
def drafts(tiny):
    """Aligned Sparrow drafts of the tiny targets by name (``vidspec.decoding.testing.aligned_sparrow``),
    one per test module (some tests fuse a draft's weights in place)."""
    from vidspec.decoding.testing import aligned_sparrow

    cache: dict = {}

    def get(name: str):
        if name not in cache:
            cache[name] = aligned_sparrow(tiny(name))
        return cache[name]

    return get


@pytest.fixture(scope="module")
def perturbed():
    """Draft VLMs that agree with their tiny target often but not always: the target with a noisy LM
    head (seed 3), by name; one per test module."""
    import torch

    from vidspec.decoding.models import load_target

    cache: dict = {}

    def get(name: str):
        if name not in cache:
            m = load_target(name)
            with torch.no_grad(), torch.random.fork_rng(devices=[]):
                torch.manual_seed(3)
                m.model.lm_head.weight.add_(0.6 * torch.randn_like(m.model.lm_head.weight))
            cache[name] = m
        return cache[name]

    return get


def _cuda_loader(dtype: str):
    """A getter of tiny targets by name on CUDA in ``dtype``, each loaded once."""
    from vidspec.decoding.models import load_target

    cache: dict = {}

    def get(name: str):
        if name not in cache:
            cache[name] = load_target(name, device="cuda", dtype=dtype)
        return cache[name]

    return get


@pytest.fixture(scope="module")
def cuda_tiny_fp32():
    """Tiny targets by name on CUDA in fp32 (the GPU tests compare graph paths with eager ones exactly)."""
    return _cuda_loader("float32")


@pytest.fixture(scope="module")
def cuda_tiny():
    """Tiny targets by name on CUDA in bf16 (the GPU tests of bf16 numerics against HF)."""
    return _cuda_loader("bfloat16")
