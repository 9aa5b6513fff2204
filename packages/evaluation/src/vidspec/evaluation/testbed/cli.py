"""``vidspec testbed``: build the SynthVid testbed's releases from a testbed recipe.

Usage::

    vidspec testbed build --recipe configs/testbed/llava-ov-release.yaml --out runs/testbed/llava-ov
    vidspec testbed build --recipe configs/testbed/tiny-cpu.yaml --out runs/testbed/tiny     # minutes on a CPU
    vidspec testbed build --recipe R --out O --stop-after vision   # the dataset and tower only
    vidspec testbed stages --recipe R --out O                      # what would run, and what is done

Running the same command again resumes: finished stages are skipped, a killed training stage continues from its
last checkpoint. See :mod:`vidspec.evaluation.testbed.pipeline` for the stages and
:mod:`vidspec.evaluation.testbed.recipe` for the recipe format.
"""

from __future__ import annotations

import logging

from vidspec.decoding.cli import run_function
from vidspec.decoding.errors import ConfigError


def build(recipe: str = "", out: str = "runs/testbed", stop_after: str | None = None) -> int:
    """Build the testbed of a recipe (``vidspec testbed build``).

    Args:
        recipe: testbed recipe (YAML, e.g. ``configs/testbed/tiny-cpu.yaml``).
        out: output folder: dataset, tower, runs, releases, figures.json.
        stop_after: stop once this stage is done (synthvid, vision, target, finetune, draft, sparrow).
    """
    from vidspec.evaluation.testbed.pipeline import build as run_build
    from vidspec.evaluation.testbed.recipe import load_recipe

    if not recipe:
        raise ConfigError("--recipe is required (e.g. configs/testbed/tiny-cpu.yaml)")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("vidspec.evaluation.testbed").setLevel(logging.INFO)
    run_build(load_recipe(recipe), out, stop_after=stop_after)
    return 0


def stages(recipe: str = "", out: str = "runs/testbed") -> int:
    """List a recipe's stages and whether each is done in ``out`` (``vidspec testbed stages``).

    Args:
        recipe: testbed recipe (YAML).
        out: output folder of the build.
    """
    from pathlib import Path

    from vidspec.evaluation.testbed.pipeline import Context, Layout, plan
    from vidspec.evaluation.testbed.recipe import load_recipe

    if not recipe:
        raise ConfigError("--recipe is required")
    r = load_recipe(recipe)
    ctx = Context(r, Layout(Path(out).resolve()))
    for stage in plan(r, ctx.layout):
        done = all(p.exists() for p in stage.outputs(ctx))
        print(f"{stage.name:<10} {'done' if done else 'to run'}  {', '.join(str(p) for p in stage.outputs(ctx))}")
    return 0


#: ``vidspec testbed`` subcommands.
COMMANDS = {"build": build, "stages": stages}


def testbed_main(argv: list[str]) -> int:
    """Entry point of ``vidspec testbed {build,stages} [OPTIONS]``."""
    argv = list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        raise ConfigError(f"unknown testbed subcommand {argv[0]!r} (choose from {', '.join(COMMANDS)})")
    return run_function(COMMANDS[argv[0]], f"vidspec testbed {argv[0]}", argv[1:])
