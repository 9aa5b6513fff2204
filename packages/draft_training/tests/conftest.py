"""Shared fixtures (helpers live in vidspec.draft_training.testing: importlib mode cannot import conftest)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vidspec.draft_training.testing import write_tiny_dataset

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory) -> Path:
    return write_tiny_dataset(tmp_path_factory.mktemp("tinyvid") / "data")
