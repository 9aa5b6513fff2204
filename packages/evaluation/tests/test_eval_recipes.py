"""Every configs/eval/*.yaml parses against ``vidspec eval`` and builds a valid EvalConfig."""

from __future__ import annotations

from pathlib import Path

import pytest

from vidspec.evaluation.cli_eval import eval_parser
from vidspec.evaluation.runner import EvalConfig

RECIPES = sorted((Path(__file__).resolve().parents[3] / "configs" / "eval").glob("*.yaml"))


def test_there_are_recipes():
    assert RECIPES


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_recipe_parses(recipe):
    assert recipe.read_text().startswith("#"), "a recipe starts with its launch command"
    assert f"vidspec eval --config configs/eval/{recipe.name}" in recipe.read_text()
    cfg = eval_parser().parse_args(["--config", str(recipe)])
    opts = {k: v for k, v in vars(cfg).items() if not k.startswith("_") and k != "config"}
    EvalConfig.from_flags(**{k: opts[k] for k in ("benchmark", "out", "methods", "target", "draft", "sparrow", "k",
                                                  "max_new_tokens", "frames", "device", "dtype")})
