"""Example transforms: augmentations the training DataModule applies to one example at a time.

The DataModule knows nothing of where a dataset comes from. A dataset that can say more about its rows (for
instance SynthVid, whose rows carry the scene's exact facts) contributes transforms that read those columns,
and a recipe selects them by class path::

    data:
      class_path: vidspec.draft_training.data.VideoTextDataModule
      init_args:
        transforms:
          - class_path: vidspec.evaluation.synthvid.augment.TimeCrop
            init_args: {chance: 0.5, min_frames: 4}
          - class_path: vidspec.evaluation.synthvid.augment.ReverseTime
            init_args: {chance: 0.5}

A transform works in two steps:

1. :meth:`ExampleTransform.annotate` runs once per table row, in the main process, when the rows are read. It
   gets the row's columns (those the table has, of ``ExampleTransform.columns`` and the standard ``video``,
   ``question``, ``answer``, ``options``, ``style``, ``task_type``) and returns what the transform will need
   later (a small picklable mapping), or None when it can never change this row.
2. ``transform(example, rng)`` runs in the DataLoader workers on each training example it annotated: the
   decoded clip, the prompt, the answer and that mapping (``example.notes``). It returns the example to train
   on (the same one, or one with other frames and/or another answer).

The generator ``rng`` depends only on (data seed, epoch, example index, the transform's place in the list), so a
resumed run, a worker process and a run with other workers all draw the same augmentations. Transforms apply
to training examples only; validation sees the rows as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from vidspec.decoding.types import VideoClip


@dataclass(frozen=True)
class Example:
    """One training example before tokenization.

    Attributes:
        clip: the decoded frames (the adapter's frame budget), with their times.
        prompt: the text before the answer (a multiple-choice row's question, options and instruction).
        answer: the text the model learns to write.
        kind: a multiple-choice row's question type ("colour", ...; "mcq" when untyped), "" otherwise.
        notes: what this transform's :meth:`ExampleTransform.annotate` returned for the example's row.
    """

    clip: VideoClip
    prompt: str
    answer: str
    kind: str = ""
    notes: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class ExampleTransform(Protocol):
    """An augmentation of training examples (see the module doc).

    Attributes:
        columns: table columns :meth:`annotate` reads beyond the standard ones; read only when present.
        keeps_frame_count: False when the transform may change how many frames a clip has (a LLaVA-OV batch
            stacks its clips' frames, so the DataModule refuses such a transform for LLaVA-OV).
        needs: what a row must have for the transform to apply, for the error raised when it applies to no
            training row (e.g. "SynthVid's facts").
    """

    columns: tuple[str, ...]
    keeps_frame_count: bool
    needs: str

    def annotate(self, row: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """What the transform needs of ``row`` later, or None when it never changes this row."""
        ...

    def __call__(self, example: Any, rng: np.random.Generator) -> Any:
        """The :class:`Example` to train on, made from ``example`` (an :class:`Example`); ``rng`` is seeded per
        (seed, epoch, example, transform).

        The example is typed ``Any`` here because transforms match this protocol by shape: a package that
        contributes transforms need not import the training package (recipes load them by class path, and
        jsonargparse checks that the signatures match this one).
        """
        ...


def transform_name(transform: ExampleTransform) -> str:
    """A transform's class name, for messages."""
    return type(transform).__name__
