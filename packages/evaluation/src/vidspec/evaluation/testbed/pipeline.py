"""``vidspec testbed build``: the SynthVid testbed's release pipeline, stage by stage, resumable.

Stages, in order (a recipe may leave out vision, finetune, draft and sparrow):

  synthvid   the dataset (``out/synthvid``)
  vision     the target's vision tower pretrained on rendered one-object scenes (``out/vision``)
  target     the target Video-LLM's SFT, tower initialised from ``vision`` and frozen as the recipe says
  finetune   a second target stage, started from the first's export
  draft      a draft VLM (another caption style) for plain speculative decoding
  sparrow    a Sparrow draft distilled from the final target
  figures    the releases measured on the validation split (``out/figures.json``)

Each training stage runs ``vidspec train fit`` (run folder ``out/runs/<stage>``) and ``vidspec export``
(``out/releases/<release>``) as subprocesses, so this package never imports the training package. A stage whose
outputs exist is skipped, and a training stage killed mid-run resumes from its last checkpoint (Lightning restores
the step, the optimizer, the data position and the elapsed time; one killed before its first checkpoint starts
over), so a run stopped by a time limit is finished by running the same command again. What each stage runs is
logged, and the commands go to ``out/commands.log``.

The releases land in ``out/releases``: ``synthvid-target`` (the final target), ``synthvid-target-sft`` (its first
stage, with a fine-tune), ``synthvid-draft``, ``sparrow-synthvid``.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from vidspec.decoding.errors import ConfigError
from vidspec.evaluation.synthvid.dataset import SynthVidConfig
from vidspec.evaluation.testbed.recipe import FiguresStage, TestbedRecipe, TrainStage, VisionStage

log = logging.getLogger(__name__)

TARGET, TARGET_SFT, DRAFT, SPARROW = "synthvid-target", "synthvid-target-sft", "synthvid-draft", "sparrow-synthvid"
#: Stage names, in the order they run.
STAGES = ("synthvid", "vision", "target", "finetune", "draft", "sparrow", "figures")


@dataclass(frozen=True)
class Layout:
    """Where a build puts things under its output folder ``out``."""

    out: Path

    @property
    def data(self) -> Path:
        return self.out / "synthvid"

    @property
    def vision(self) -> Path:
        return self.out / "vision"

    @property
    def figures(self) -> Path:
        return self.out / "figures.json"

    def run(self, stage: str) -> Path:
        return self.out / "runs" / stage

    def release(self, name: str) -> Path:
        return self.out / "releases" / name


@dataclass(frozen=True)
class Context:
    """What every stage sees: the recipe, the layout, and how to run a ``vidspec`` subcommand."""

    recipe: TestbedRecipe
    layout: Layout
    vidspec: tuple[str, ...] = (sys.executable, "-m", "vidspec.decoding.cli")

    @property
    def device(self) -> str:
        if self.recipe.device != "auto":
            return self.recipe.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def call(self, *args: str) -> None:
        """Run ``vidspec ARGS`` to completion, logging the command; a failure stops the build."""
        cmd = [*self.vidspec, *args]
        text = "vidspec " + shlex.join(args)
        log.info("   $ %s", text)
        self.layout.out.mkdir(parents=True, exist_ok=True)
        with open(self.layout.out / "commands.log", "a") as f:
            f.write(text + "\n")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        proc = subprocess.run(cmd, env=env)
        if proc.returncode != 0:
            raise ConfigError(f"testbed stage command failed (exit {proc.returncode}): {text}")


class Stage(Protocol):
    """One step of the pipeline: done when its outputs exist."""

    name: str

    def outputs(self, ctx: Context) -> tuple[Path, ...]:
        """Files whose presence means the stage is done."""
        ...

    def run(self, ctx: Context) -> None:
        """Make the outputs."""
        ...


@dataclass(frozen=True)
class SynthVidData:
    """The SynthVid dataset (``vidspec data synthvid``'s generator, in this process)."""

    config: SynthVidConfig
    name: str = "synthvid"

    def outputs(self, ctx: Context) -> tuple[Path, ...]:
        return (ctx.layout.data / "synthvid.json",)

    def run(self, ctx: Context) -> None:
        from vidspec.evaluation.synthvid.dataset import generate_synthvid

        generate_synthvid(ctx.layout.data, self.config, progress=False)


@dataclass(frozen=True)
class VisionPretraining:
    """Scene files rendered here, the tower trained by ``vidspec tower-pretrain``."""

    stage: VisionStage
    family: str
    synthvid: SynthVidConfig
    workers: int = 1
    name: str = "vision"

    def outputs(self, ctx: Context) -> tuple[Path, ...]:
        return (ctx.layout.vision / "tower.safetensors",)

    def run(self, ctx: Context) -> None:
        from vidspec.evaluation.synthvid.world import preset as world_preset
        from vidspec.evaluation.testbed.scenes import write_scene_file

        s, out = self.stage, ctx.layout.vision
        world = world_preset(self.synthvid.preset)
        size = int(self.synthvid.size.split("x")[0]) if self.synthvid.size else world.width
        frames = self.synthvid.frames or world.num_frames
        files = {}
        for split, n, seed in (("train", s.train_scenes, 0), ("test", s.test_scenes, 1)):
            files[split] = out / f"{split}.safetensors"
            if not files[split].is_file():
                write_scene_file(files[split], n, seed, self.synthvid.preset, size, frames, pairs=s.pairs,
                                 codec=s.codec, workers=self.workers)
        args = ["tower-pretrain", "--train", str(files["train"]), "--test", str(files["test"]), "--out", str(out),
                "--family", self.family, "--vision_hidden_size", str(s.hidden_size), "--vision_layers", str(s.layers),
                "--vision_heads", str(s.heads), "--patch_size", str(s.patch_size), "--lm_hidden", str(s.lm_hidden),
                "--steps", str(s.steps), "--lr", str(s.lr), "--batch", str(s.batch), "--warmup", str(s.warmup),
                "--every", str(min(s.every, s.steps)), "--device", ctx.device]
        if s.init_std is not None:
            args += ["--vision_init_std", str(s.init_std)]
        ctx.call(*args)


@dataclass(frozen=True)
class Training:
    """A training stage: ``vidspec train fit`` with the wiring to the other stages, then ``vidspec export``.

    Attributes:
        name: the stage's name (its run folder).
        release: the release folder it exports to.
        stage: the recipe's training stage.
        wiring: the overrides that tie it to the other stages (dataset, tokenizer, tower, target).
    """

    name: str
    release: str
    stage: TrainStage
    wiring: tuple[str, ...]

    def outputs(self, ctx: Context) -> tuple[Path, ...]:
        return (ctx.layout.release(self.release) / "manifest.json",)

    def fit_args(self, ctx: Context) -> list[str]:
        """The ``vidspec train fit`` arguments of this stage (without the resume flag)."""
        run, s = ctx.layout.run(self.name), self.stage
        data = ctx.layout.data
        args = ["train", "fit", "--config", s.recipe, *ctx.recipe.train_args,
                "--data.path", str(data), "--data.frame_cache", str(data / "frames"),
                "--data.num_workers", str(ctx.recipe.workers),
                "--trainer.default_root_dir", str(run), "--trainer.logger.init_args.save_dir", str(run),
                "--checkpoint.dirpath", str(run / "checkpoints")]
        if s.max_steps is not None:
            args += ["--trainer.max_steps", str(s.max_steps)]
        if s.max_time is not None:
            args += ["--trainer.max_time", s.max_time]
        if s.batch_size is not None:
            args += ["--data.batch_size", str(s.batch_size)]
        return args + [*self.wiring, *s.args]

    def run(self, ctx: Context) -> None:
        run, args = ctx.layout.run(self.name), self.fit_args(ctx)
        if (run / "checkpoints" / "last.ckpt").is_file():
            log.info("   resuming %s from its last checkpoint", self.name)
            args += ["--ckpt_path", "last"]  # found through the checkpoint callback's folder
        elif run.exists():  # killed before its first checkpoint: start over, without its partial logs
            log.info("   %s left no checkpoint: starting it over", self.name)
            shutil.rmtree(run)
        ctx.call(*args)
        ctx.call("export", "--ckpt", str(run / "checkpoints" / "last.ckpt"), "--out",
                 str(ctx.layout.release(self.release)), "--overwrite", "true", "--dtype", self.stage.export_dtype)


@dataclass(frozen=True)
class Figures:
    """The releases measured with the fact judge, MCQ accuracy and the drafts' tau (``out/figures.json``)."""

    stage: FiguresStage
    draft: bool
    sparrow: bool
    name: str = "figures"

    def outputs(self, ctx: Context) -> tuple[Path, ...]:
        return (ctx.layout.figures,)

    def run(self, ctx: Context) -> None:
        import json

        from vidspec.evaluation.testbed.figures import measure_testbed

        L, s = ctx.layout, self.stage
        report = measure_testbed(L.data, L.release(TARGET), draft=L.release(DRAFT) if self.draft else None,
                                 sparrow=L.release(SPARROW) if self.sparrow else None, split=s.split, limit=s.limit,
                                 mcq_limit=s.mcq_limit, max_new_tokens=s.max_new_tokens, k=s.k, device=ctx.device)
        tmp = L.figures.with_name(".figures.json.partial")
        tmp.write_text(json.dumps(report, indent=2) + "\n")
        tmp.replace(L.figures)
        cap, mcq = report["captions"], report["mcq"]
        log.info("   caption precision %s over %d claims, MCQ accuracy %s over %d questions%s%s",
                 _fmt(cap["precision"]), cap["claims"], _fmt(mcq["accuracy"]), mcq["questions"],
                 f", draft tau {_fmt(report['draft']['tau'])}" if "draft" in report else "",
                 f", Sparrow tau {_fmt(report['sparrow']['tau'])}" if "sparrow" in report else "")


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def plan(recipe: TestbedRecipe, layout: Layout) -> list[Stage]:
    """The stages of ``recipe``, in order, with the wiring between them."""
    data = layout.data
    stages: list[Stage] = [SynthVidData(recipe.synthvid)]
    target_wiring: tuple[str, ...] = ("--model.init_args.tokenizer", str(data / "tokenizer"))
    if recipe.vision is not None:
        stages.append(VisionPretraining(recipe.vision, recipe.family, recipe.synthvid, recipe.workers))
        target_wiring += ("--model.init_args.vision_init", str(layout.vision))
    first = TARGET_SFT if recipe.finetune is not None else TARGET
    stages.append(Training("target", first, recipe.target, target_wiring))
    if recipe.finetune is not None:
        stages.append(Training("finetune", TARGET, recipe.finetune,
                               ("--model.init_args.init_from", str(layout.release(TARGET_SFT)))))
    if recipe.draft is not None:
        stages.append(Training("draft", DRAFT, recipe.draft, ("--model.init_args.tokenizer", str(data / "tokenizer"))))
    if recipe.sparrow is not None:
        stages.append(Training("sparrow", SPARROW, recipe.sparrow,
                               ("--model.init_args.target", str(layout.release(TARGET)))))
    stages.append(Figures(recipe.figures, draft=recipe.draft is not None, sparrow=recipe.sparrow is not None))
    return stages


def build(recipe: TestbedRecipe, out: str | Path, stop_after: str | None = None,
          vidspec: tuple[str, ...] | None = None) -> Path:
    """Run the stages of ``recipe`` into ``out``, skipping those whose outputs exist; returns ``out``.

    Args:
        recipe: what to build.
        out: the output folder (created).
        stop_after: stop once this stage is done (e.g. "vision" to share the dataset and the tower between runs,
            or "target" to give the SFT a device call of its own); None: run every stage.
        vidspec: the command that runs ``vidspec`` subcommands (default: this Python's ``vidspec``).

    Raises:
        ConfigError: an unknown ``stop_after``, or a stage command that failed.
    """
    if stop_after is not None and stop_after not in STAGES:
        raise ConfigError(f"stop_after must be one of {STAGES}, got {stop_after!r}")
    layout = Layout(Path(out).resolve())
    ctx = Context(recipe, layout, **({"vidspec": tuple(vidspec)} if vidspec else {}))
    t0 = time.perf_counter()
    for stage in plan(recipe, layout):
        if all(p.exists() for p in stage.outputs(ctx)):
            log.info("== %s: done already (%s)", stage.name, ", ".join(str(p) for p in stage.outputs(ctx)))
        else:
            log.info("== %s", stage.name)
            start = time.perf_counter()
            stage.run(ctx)
            log.info("   %s took %.0f s", stage.name, time.perf_counter() - start)
        if stage.name == stop_after:
            log.info("== stopped after %s, as asked; the same command without it goes on", stop_after)
            break
    log.info("== testbed built in %s (%.0f s)", layout.out, time.perf_counter() - t0)
    return layout.out
