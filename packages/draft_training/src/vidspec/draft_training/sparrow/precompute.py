"""``vidspec sparrow-features``: run the target over a dataset once and fill a feature cache.

The cache itself (layout, crash-safe writes, reading it back in training) is
:mod:`vidspec.draft_training.sparrow.features`; this module wires the Sparrow training module (for its target)
and the training DataModule (for the batches) to it.
"""

from __future__ import annotations

import torch

from vidspec.decoding.cli import run_function
from vidspec.decoding.errors import ConfigError
from vidspec.draft_training.data import VideoTextDataModule
from vidspec.draft_training.sparrow.features import precompute_features
from vidspec.draft_training.sparrow.module import SparrowDistillModule


def features(target: str = "tiny-qwen2.5-vl", data: str = "", out: str = "", tables: list[str] | None = None,
             split: str = "train", batch_size: int = 4, max_frames: int | None = None, device: str = "auto",
             limit: int | None = None, keep: str = "all") -> int:
    """Precompute the target features of a dataset for Sparrow training (``vidspec sparrow-features``).

    Args:
        target: the target model (tiny name, folder or hub id).
        data: dataset folder (as ``VideoTextDataModule.path``).
        out: cache folder to write (resumable).
        tables: sub-tables of ``data`` to include ("." is ``data`` itself).
        split: dataset split.
        batch_size: examples per target pass.
        max_frames: frames per video (default: the target's).
        device: "auto", "cpu", "cuda", ...
        limit: only the first N examples.
        keep: "all" (the three states at every position) or "read" (only the states training reads: text positions
            and the one before each, and with IVSB the middle layer at visual positions); the bytes a token costs
            are logged before the run starts.
    """
    if not data or not out:
        raise ConfigError("--data and --out are required")
    module = SparrowDistillModule(target=target, max_frames=max_frames)
    dev = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    module.to(dev)
    dm = VideoTextDataModule(path=data, tables=tables, train_split=split, val_split=None, batch_size=batch_size,
                             shuffle=False, max_train_samples=limit)
    dm.attach(module.input_spec())
    dm.setup("fit")
    n = precompute_features(module, dm.train_dataloader(), out, keep=keep, device=dev)
    print(f"{n} examples written to {out}")
    return 0


def features_main(argv: list[str]) -> int:
    """Entry point of ``vidspec sparrow-features`` (see :func:`features`)."""
    return run_function(features, "vidspec sparrow-features", argv)
