"""A testbed recipe: the typed stages of ``vidspec testbed build``, read from a YAML file.

A recipe names what to build, stage by stage (every section but ``synthvid``, ``target`` and ``figures`` may be
left out)::

    family: llava-ov                 # or qwen2.5-vl
    device: cuda                     # vision pretraining and figures ("auto": cuda when available)
    workers: 8                       # SynthVid rendering and DataLoader workers
    train_args: [--trainer.accelerator, gpu, --trainer.precision, bf16-mixed]   # every training stage
    synthvid: {num_videos: 12000, seed: 0, preset: easy, frames: 8, size: 64x64, styles: "alpha:1,beta:1",
               captions_per_video: 2}
    vision: {train_scenes: 20000, test_scenes: 2000, steps: 8000, hidden_size: 128, layers: 4, heads: 4, lr: 5.0e-4}
    target: {recipe: configs/train/synthvid-target-cpu.yaml, max_steps: 2400, max_time: "00:00:03:30",
             args: [--model.init_args.arch.hidden_size, "192"]}
    finetune: {recipe: configs/train/synthvid-target-mcq-ft.yaml, max_steps: 800}
    draft: {recipe: configs/train/synthvid-draft-cpu.yaml, max_time: "00:00:01:30"}
    sparrow: {recipe: configs/train/sparrow-tiny-cpu.yaml, max_time: "00:00:01:00"}
    figures: {limit: 40}

Training stages are ``vidspec train fit`` runs of a training recipe (``configs/train``) with the stage's ``args``
as overrides; the pipeline adds only what ties the stages together (dataset, tokenizer, pretrained tower, the
target a later stage starts from or distils, run and checkpoint folders). Paths in a recipe are relative to the
working directory.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

from vidspec.decoding.errors import ConfigError
from vidspec.evaluation.synthvid.dataset import SynthVidConfig

FAMILIES = ("llava-ov", "qwen2.5-vl")


@dataclass(frozen=True)
class VisionStage:
    """Vision-tower pretraining on rendered one-object scenes (``vidspec tower-pretrain``).

    Attributes:
        train_scenes: scenes to train on (SynthVid seed 0, the training world).
        test_scenes: held-out scenes (seed 1) for the accuracy printed along the way.
        steps: optimizer steps.
        hidden_size: the tower's width (the target's ``arch.vision_hidden_size``).
        layers: its layers (``arch.vision_layers``).
        heads: its attention heads (``arch.vision_heads``).
        patch_size: its patch size in pixels (``arch.patch_size``).
        lr: peak learning rate.
        batch: scenes per step.
        warmup: warm-up steps.
        every: held-out evaluation period in steps.
        lm_hidden: Qwen2.5-VL: the target's ``arch.hidden_size``, which its pretrained merger projects into.
        init_std: Qwen2.5-VL: the tower's initial weight std (default: transformers').
        pairs: Qwen2.5-VL: train on the first and last frame pairs, as its tower reads them.
        codec: render the scenes through H.264 and back, as the target's frames are.
    """

    train_scenes: int = 20000
    test_scenes: int = 2000
    steps: int = 8000
    hidden_size: int = 128
    layers: int = 4
    heads: int = 4
    patch_size: int = 8
    lr: float = 5e-4
    batch: int = 128
    warmup: int = 100
    every: int = 1000
    lm_hidden: int = 192
    init_std: float | None = None
    pairs: bool = False
    codec: bool = False


@dataclass(frozen=True)
class TrainStage:
    """A ``vidspec train fit`` run of a training recipe, then ``vidspec export`` of its last checkpoint.

    Attributes:
        recipe: the training recipe (YAML).
        max_steps: ``--trainer.max_steps`` (the LR schedule of the recipes decays over it); None: the recipe's.
        max_time: ``--trainer.max_time`` (``DD:HH:MM:SS``); None: the recipe's.
        batch_size: ``--data.batch_size``; None: the recipe's.
        args: more ``vidspec train fit`` overrides, as on the command line.
        export_dtype: the release's weights dtype (``vidspec export --dtype``).
    """

    recipe: str
    max_steps: int | None = None
    max_time: str | None = None
    batch_size: int | None = None
    args: tuple[str, ...] = ()
    export_dtype: str = "float32"


@dataclass(frozen=True)
class FiguresStage:
    """Measuring the releases on the SynthVid validation split (:func:`~.figures.measure_testbed`).

    Attributes:
        limit: videos captioned and judged.
        mcq_limit: multiple-choice questions answered (default: ``limit``).
        k: draft tokens per round for the drafts' tau.
        max_new_tokens: most tokens per caption.
        split: the dataset split.
    """

    limit: int = 40
    mcq_limit: int | None = None
    k: int = 4
    max_new_tokens: int = 64
    split: str = "validation"


@dataclass(frozen=True)
class TestbedRecipe:
    """Everything ``vidspec testbed build`` makes, stage by stage (see the module doc).

    Attributes:
        synthvid: the dataset every stage trains and is measured on.
        target: the target's SFT.
        figures: what the releases are measured on.
        family: "llava-ov" or "qwen2.5-vl" (of the target and the draft VLM).
        device: device of vision pretraining and figures ("auto": cuda when available).
        workers: SynthVid rendering processes and DataLoader workers.
        train_args: overrides given to every training stage (accelerator, precision, ...).
        vision: vision-tower pretraining before the target (None: the target's tower starts from scratch).
        finetune: a second target stage that starts from the first's export (None: none).
        draft: a draft VLM for plain speculative decoding (None: none).
        sparrow: a Sparrow draft distilled from the final target (None: none).
    """

    synthvid: SynthVidConfig
    target: TrainStage
    figures: FiguresStage = field(default_factory=FiguresStage)
    family: str = "llava-ov"
    device: str = "auto"
    workers: int = 1
    train_args: tuple[str, ...] = ()
    vision: VisionStage | None = None
    finetune: TrainStage | None = None
    draft: TrainStage | None = None
    sparrow: TrainStage | None = None

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ConfigError(f"testbed recipe: family must be one of {FAMILIES}, got {self.family!r}")
        if self.workers < 1:
            raise ConfigError(f"testbed recipe: workers must be >= 1, got {self.workers}")


def _build(cls: type, value: Any, where: str) -> Any:
    """``cls`` (a dataclass) from a mapping, with its nested dataclasses; unknown keys and bad types are errors."""
    if isinstance(value, cls):
        return value
    if not isinstance(value, dict):
        raise ConfigError(f"testbed recipe: {where} must be a mapping, got {value!r}")
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - names)
    if unknown:
        raise ConfigError(f"testbed recipe: unknown key(s) {unknown} in {where or 'the top level'} (known: {sorted(names)})")
    kwargs = {}
    for key, v in value.items():
        hint = hints[key]
        inner = next((t for t in getattr(hint, "__args__", ()) if dataclasses.is_dataclass(t)), None)
        if dataclasses.is_dataclass(hint):
            inner = hint
        if inner is not None and v is not None:
            v = _build(inner, v, f"{where}.{key}" if where else key)
        elif getattr(hint, "__origin__", None) is tuple or "tuple[" in str(hint):
            if not isinstance(v, (list, tuple)):
                raise ConfigError(f"testbed recipe: {where}.{key} must be a list of strings, got {v!r}")
            v = tuple(str(x) for x in v)
        kwargs[key] = v
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise ConfigError(f"testbed recipe: {where or 'top level'}: {e}") from None


def load_recipe(path: str | Path) -> TestbedRecipe:
    """Read a testbed recipe (YAML; its comments are documentation only).

    Raises:
        ConfigError: no such file, or a recipe with unknown keys, missing sections or bad values.
    """
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"no testbed recipe at {str(path)!r}")
    doc = yaml.safe_load(p.read_text()) or {}
    return _build(TestbedRecipe, doc, "")
