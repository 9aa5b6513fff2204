"""``vidspec train`` (LightningCLI over YAML recipes) and ``vidspec export`` (checkpoint -> release).

Usage::

    vidspec train fit --config configs/train/synthvid-target-cpu.yaml
    vidspec train fit --config configs/train/synthvid-target-cpu.yaml --trainer.max_steps 50 \\
        --data.batch_size 4                      # overrides, dotted keys
    vidspec train fit --config RECIPE --ckpt_path last        # resume a killed run exactly
    vidspec train fit --config RECIPE --print_config          # the resolved config as YAML
    vidspec train fit --help
    vidspec export --ckpt runs/X/checkpoints/last.ckpt --out releases/X

The model is chosen by class path (``model.class_path``), so any LightningModule can be trained
through the same recipes and data: :class:`~vidspec.draft_training.sft.VLMSFTModule` for VLM SFT,
a Sparrow distillation module for drafts. Every run also gets

- ``checkpoint.*``: a ModelCheckpoint (``save_last`` by default, ``every_n_train_steps``; its ``last.ckpt`` also holds
  the step a run ends on: :class:`~vidspec.draft_training.callbacks.FinalCheckpoint`),
- ``metrics.jsonl`` in the log dir (per-step training metrics, see :mod:`.callbacks`),
- a warning when a run ends before its learning-rate schedule does (:class:`~.callbacks.ScheduleCheck`),
- the resolved config saved as ``config.yaml`` in the log dir and inside each checkpoint,
- the intra-op thread count and numeric flags saved in each checkpoint and restored on resume, so a resumed run is
  bit-exact on the CPU whatever thread count its process got (:class:`~.callbacks.PinNumerics`),
- ``--fail_at_step N``: raise at step N (fault injection for resume tests).

A recipe with an unknown key or a bad value exits with status 2 and one line naming it; so does a
``model.init_args.tokenizer`` (or ``init_from``) folder that does not exist, and an integer
``trainer.val_check_interval`` larger than the training batches of an epoch (found when ``fit`` starts).
Relative paths in a recipe are resolved against the current directory (run from the repository root),
not the recipe's folder.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from pathlib import Path

import yaml
from lightning.pytorch import LightningModule
from lightning.pytorch.cli import LightningCLI

from vidspec.decoding.cli import one_line
from vidspec.decoding.errors import ConfigError, VidspecError
from vidspec.draft_training.callbacks import (
    FailAtStep,
    FinalCheckpoint,
    PinNumerics,
    ScheduleCheck,
    StepMetrics,
    TextProgress,
)
from vidspec.draft_training.data import VideoTextDataModule

SUBCOMMANDS = ("fit", "validate")


class VidspecTrainCLI(LightningCLI):
    """LightningCLI with vidspec's run conventions (checkpointing, metrics file, config capture)."""

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_lightning_class_args(FinalCheckpoint, "checkpoint")
        parser.set_defaults({
            "checkpoint.save_last": True,
            "checkpoint.save_top_k": 1,
            "checkpoint.every_n_train_steps": 100,
            "checkpoint.filename": "step{step:07d}",
            "checkpoint.auto_insert_metric_name": False,
        })
        parser.add_argument("--fail_at_step", type=int, default=0,
                            help="raise at this global step (0: never); to test that resuming is exact")

    def instantiate_trainer(self, **kwargs):
        trainer = super().instantiate_trainer(**kwargs)
        extra = [StepMetrics(), ScheduleCheck(), PinNumerics()]
        if not trainer.progress_bar_callback:  # cluster logs: a plain line every log_every_n_steps
            extra.append(TextProgress())
        fail = self.config[self.subcommand].get("fail_at_step", 0) if self.subcommand else 0
        if fail:
            extra.insert(0, FailAtStep(fail))
        # Before the checkpoint callbacks: a crash at step N must not have saved step N.
        trainer.callbacks[0:0] = extra
        return trainer

    def before_instantiate_classes(self) -> None:
        super().before_instantiate_classes()
        if self.subcommand is not None:
            check_model_paths(self.config[self.subcommand])

    def _parse_ckpt_path(self) -> None:
        # LightningCLI reads --ckpt_path here (and the trainer again at fit): a checkpoint cut short by a kill
        # or a full disk is refused first, in one line, instead of torch's zip-reader traceback.
        subcommand = self.config.get("subcommand")
        if subcommand:
            check_resume_checkpoint(self.config[subcommand])
        # Lightning would now re-parse the checkpoint's hyper-parameters as the model's config; vidspec's modules
        # save theirs without a class path, so a checkpoint given as a file (not as `last`) failed as an "invalid
        # recipe". The recipe on the command line defines the model, for a file as for `last`.

    def instantiate_classes(self) -> None:
        super().instantiate_classes()
        if self.subcommand is None:
            return
        # The resolved recipe travels inside every checkpoint, for `vidspec export`'s manifest.
        dumped = yaml.safe_load(self.parser.dump(self.config, skip_check=True))
        run = dumped.get(self.subcommand, dumped)
        run.pop("config", None)
        if hasattr(self.model, "vidspec_run_config") or isinstance(self.model, LightningModule):
            self.model.vidspec_run_config = run


def check_resume_checkpoint(config) -> None:
    """Refuse ``--ckpt_path`` (a file, or ``last``: the run's ``last.ckpt``) if it is missing, truncated or not a
    torch checkpoint.

    Raises:
        ConfigError: naming the file and the cause.
    """
    from vidspec.decoding.integrity import check_torch_file

    ckpt = config.get("ckpt_path")
    if not ckpt or ckpt in ("best", "hpc", "registry"):
        return
    if ckpt == "last":  # Lightning finds it in the checkpoint folder; a run that saved none starts afresh
        dirpath = config.get("checkpoint.dirpath")
        path = Path(dirpath) / "last.ckpt" if dirpath else None
        if path is None or not path.exists():
            return
    else:
        path = Path(ckpt)
    check_torch_file(path, "--ckpt_path")


#: Model arguments that name a folder on disk (or a hub id); checked before anything is built.
PATH_ARGS = ("tokenizer", "init_from")


def _looks_local(value: str) -> bool:
    """True when ``value`` can only be a filesystem path: a hub id is ``name`` or ``org/name``."""
    return (os.path.isabs(value) or value.startswith((".", "~")) or value.count("/") >= 2
            or os.sep != "/" and os.sep in value)


def check_model_paths(config) -> None:
    """Fail with one line naming a recipe's missing tokenizer/init_from folder and how it was resolved.

    A relative path is resolved against the current directory (not the recipe's folder), which is
    why a recipe run from elsewhere than the repository root cannot find ``data/cache/...``.

    Raises:
        ConfigError: ``model.init_args.tokenizer`` (or ``init_from``) is a local path that does not exist.
    """
    model = getattr(config, "model", None)
    init_args = getattr(model, "init_args", None) if model is not None else None
    if init_args is None:
        return
    for key in PATH_ARGS:
        value = getattr(init_args, key, None) if not isinstance(init_args, dict) else init_args.get(key)
        if not isinstance(value, str) or not value or not _looks_local(value):
            continue
        path = Path(value).expanduser()
        if path.exists():
            continue
        if path.is_absolute():
            raise ConfigError(f"model.init_args.{key}: {value} does not exist")
        raise ConfigError(f"model.init_args.{key}: {value} does not exist: a relative path is resolved relative to "
                          f"the current directory {Path.cwd()}, giving {path.absolute()}; run from the folder the "
                          f"recipe expects (usually the repository root), give an absolute path, or override it "
                          f"with --model.init_args.{key} PATH")


def _user_error(e: BaseException) -> VidspecError | None:
    """The VidspecError behind ``e`` (raised in a recipe's class constructor), if any."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, VidspecError):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


#: Lightning's ValueError (``_FitLoop.setup_data``, 2.5-2.6) when an int ``val_check_interval`` exceeds the
#: batches of an epoch: it comes only once the train dataloader exists, deep inside ``fit``.
_VAL_CHECK_TOO_LARGE = re.compile(r"`val_check_interval` \((\d+)\) must be less than or equal to the number "
                                  r"of the training batches \((\d+)\)")


def _val_check_interval_error(e: BaseException) -> str | None:
    """The one-line message for Lightning's "val_check_interval > batches per epoch" error, else None."""
    match = _VAL_CHECK_TOO_LARGE.search(str(e)) if isinstance(e, ValueError) else None
    if match is None:
        return None
    interval, batches = match.groups()
    return (f"trainer.val_check_interval={interval} is larger than the {batches} training batches per epoch: "
            f"lower it or set trainer.check_val_every_n_epoch=null (then it counts batches across epochs)")


def run_cli(argv: list[str], run: bool = True, cli_class: type[VidspecTrainCLI] = VidspecTrainCLI) -> VidspecTrainCLI:
    """Build (and with ``run``, execute) the training CLI on ``argv``.

    Raises:
        ConfigError: unknown key, bad value or failing constructor in the recipe, or an integer
            ``trainer.val_check_interval`` larger than the training batches of an epoch (one line).
    """
    from jsonargparse import ArgumentError

    kwargs = dict(
        model_class=LightningModule,
        datamodule_class=VideoTextDataModule,
        subclass_mode_model=True,
        save_config_kwargs={"overwrite": True},
        parser_kwargs={"exit_on_error": False, "default_env": False},
        auto_configure_optimizers=False,
        args=argv,
    )
    if not run:
        kwargs["run"] = False
    try:
        with warnings.catch_warnings():
            # `vidspec train` passes its own argv: LightningCLI's "args and sys.argv both given" is noise.
            warnings.filterwarnings("ignore", message=".*args parameter is intended to run from within Python.*")
            return cli_class(**kwargs)
    except ArgumentError as e:
        if (user := _user_error(e)) is not None:
            raise ConfigError(one_line(user, "invalid configuration")) from None
        raise ConfigError(f"invalid recipe: {one_line(e, 'invalid configuration')}") from None
    except (TypeError, ValueError) as e:
        if (user := _user_error(e)) is not None:
            raise ConfigError(one_line(user, "invalid configuration")) from None
        if (message := _val_check_interval_error(e)) is not None:
            raise ConfigError(message) from e  # `--debug` still shows where Lightning raised it
        raise


def parse_recipe(path: str, subcommand: str = "fit", overrides: list[str] | None = None):
    """Parse (not run) a recipe through the same parser as ``vidspec train``; returns the config.

    Nothing is instantiated: no model, data or trainer is built.

    Raises:
        ConfigError: the recipe has an unknown key or a bad value.
    """
    try:
        run_cli([subcommand, "--config", str(path), *(overrides or [])], cli_class=_ParseOnlyCLI)
    except _Parsed as p:
        return p.config
    raise AssertionError("unreachable: _ParseOnlyCLI stops before instantiation")


class _Parsed(Exception):
    def __init__(self, config):
        super().__init__("parsed")
        self.config = config


class _ParseOnlyCLI(VidspecTrainCLI):
    def before_instantiate_classes(self) -> None:
        raise _Parsed(self.config)


def train_main(argv: list[str]) -> int:
    """Entry point of ``vidspec train SUBCOMMAND [--config RECIPE] [overrides]``."""
    argv = list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    if argv[0] not in SUBCOMMANDS and not argv[0].startswith("-"):
        raise ConfigError(f"unknown train subcommand {argv[0]!r} (choose from {', '.join(SUBCOMMANDS)})")
    run_cli(argv)
    return 0


def export(ckpt: str | None = None, out: str | None = None, release: str | None = None, overwrite: bool = False,
           dtype: str = "float32", trust_checkpoint: bool = False, format: str = "vidspec",
           push_to_hub: str | None = None, private: bool = False, revision: str | None = None,
           license: str | None = None) -> int:
    """Export a training checkpoint to a release folder (Hugging Face format + manifest + card).

    Args:
        ckpt: the training checkpoint (e.g. runs/X/checkpoints/last.ckpt).
        out: release folder to write.
        release: an existing release folder to convert or publish instead of a checkpoint.
        overwrite: replace ``out`` if it exists.
        dtype: weights saved as float32, bfloat16 or float16 (a Sparrow draft: float32 or bfloat16; a
            bfloat16 release is half the size and loads upcast).
        trust_checkpoint: read a checkpoint that holds more than tensors and plain types (a full
            pickle, which can run code: only for files from a source you trust).
        format: vidspec (default) or speculators (a Sparrow draft in the EAGLE-3 layout vLLM and SGLang load).
        push_to_hub: upload the folder to this Hugging Face repository (org/name); needs a token.
        private: create the repository private.
        revision: the branch to upload to (created if missing).
        license: the license id in the model card's metadata.
    """
    from vidspec.draft_training.export import export_release
    from vidspec.draft_training.sft import VLMSFTModule  # noqa: F401  (registers its exporter)

    print(export_release(ckpt, out, release=release, overwrite=overwrite, dtype=dtype,
                         trust_checkpoint=trust_checkpoint, format=format, push_to_hub=push_to_hub, private=private,
                         revision=revision, license=license))
    return 0


def export_main(argv: list[str]) -> int:
    """Entry point of ``vidspec export`` (see :func:`export`)."""
    from jsonargparse import ArgumentError, ArgumentParser

    from vidspec.decoding.cli import normalize_flags
    from vidspec.draft_training.export import expand_switches

    parser = ArgumentParser(prog="vidspec export", description=export.__doc__.splitlines()[0],
                            exit_on_error=False, default_env=False)
    parser.add_function_arguments(export, as_positional=False)
    try:
        cfg = parser.parse_args(expand_switches(normalize_flags(list(argv))))
    except ArgumentError as e:
        raise ConfigError(one_line(e, "invalid configuration")) from None
    return export(**{k: cfg[k] for k in ("ckpt", "out", "release", "overwrite", "dtype", "trust_checkpoint", "format",
                                         "push_to_hub", "private", "revision", "license")})


if __name__ == "__main__":
    # `python -m vidspec.draft_training.cli` (torchrun's launch) handles user errors as `vidspec train` does:
    # one line and status 2, the traceback only with --debug.
    from vidspec.decoding.cli import main

    sys.exit(main(["train", *sys.argv[1:]]))
