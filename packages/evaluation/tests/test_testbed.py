"""``vidspec testbed build``: the tiny CPU recipe end to end, resuming, and the recipe's checks and wiring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vidspec.decoding.errors import ConfigError
from vidspec.evaluation.testbed.pipeline import Layout, Training, plan
from vidspec.evaluation.testbed.recipe import load_recipe

REPO = Path(__file__).resolve().parents[3]
RECIPES = REPO / "configs" / "testbed"


def test_tiny_cpu_recipe_builds_measures_and_resumes(tmp_path, monkeypatch, caplog):
    from vidspec.decoding.cli import main as vidspec

    monkeypatch.chdir(REPO)  # recipes name training recipes relative to the repository root
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "tb"
    assert vidspec(["testbed", "build", "--recipe", str(RECIPES / "tiny-cpu.yaml"), "--out", str(out)]) == 0
    for release in ("synthvid-target", "sparrow-synthvid"):
        assert (out / "releases" / release / "manifest.json").is_file()
    assert (out / "vision" / "tower.safetensors").is_file()
    target = json.loads((out / "releases" / "synthvid-target" / "manifest.json").read_text())
    # the tower was wired in (the manifest names it without the machine's folders)
    assert target["training_config"]["model"]["init_args"]["vision_init"] == "vision"
    figures = json.loads((out / "figures.json").read_text())
    assert figures["captions"]["videos"] == 2 and figures["mcq"]["questions"] == 2
    assert figures["sparrow"]["lossless"] and figures["sparrow"]["tau"] >= 1  # strict decoding keeps the target's text
    commands = (out / "commands.log").read_text().splitlines()
    assert [c.split()[1] for c in commands] == ["tower-pretrain", "train", "export", "train", "export"]
    # a second run finds every stage done and runs nothing
    caplog.clear()
    assert vidspec(["testbed", "build", "--recipe", str(RECIPES / "tiny-cpu.yaml"), "--out", str(out)]) == 0
    assert len((out / "commands.log").read_text().splitlines()) == len(commands)


@pytest.mark.parametrize("name", sorted(p.name for p in RECIPES.glob("*.yaml")))
def test_recipes_load_and_name_their_launch_command(name):
    header = "\n".join(line for line in (RECIPES / name).read_text().splitlines() if line.startswith("#"))
    assert f"vidspec testbed build --recipe configs/testbed/{name}" in header
    r = load_recipe(RECIPES / name)
    for stage in (r.target, r.finetune, r.draft, r.sparrow):
        if stage is not None:
            assert (REPO / stage.recipe).is_file(), stage.recipe


def test_plan_wires_the_stages(tmp_path):
    r = load_recipe(RECIPES / "tiny-cpu.yaml")
    from dataclasses import replace

    r = replace(r, finetune=replace(r.target, recipe="configs/train/synthvid-target-mcq-ft.yaml"), draft=r.target)
    layout = Layout(tmp_path)
    stages = {s.name: s for s in plan(r, layout)}
    assert list(stages) == ["synthvid", "vision", "target", "finetune", "draft", "sparrow", "figures"]
    target, finetune, sparrow = stages["target"], stages["finetune"], stages["sparrow"]
    assert isinstance(target, Training) and target.release == "synthvid-target-sft"  # a fine-tune follows
    assert "--model.init_args.vision_init" in target.wiring
    assert finetune.wiring == ("--model.init_args.init_from", str(layout.release("synthvid-target-sft")))
    assert sparrow.wiring == ("--model.init_args.target", str(layout.release("synthvid-target")))


def test_recipe_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    with pytest.raises(ConfigError, match="no testbed recipe"):
        load_recipe(bad)
    base = (RECIPES / "tiny-cpu.yaml").read_text()
    bad.write_text(base + "\nfigure: {limit: 3}\n")
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['figure'\]"):
        load_recipe(bad)
    bad.write_text(base.replace("family: llava-ov", "family: gpt"))
    with pytest.raises(ConfigError, match="family must be one of"):
        load_recipe(bad)
    bad.write_text(base.replace("  steps: 3\n", "  stepz: 3\n", 1))
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['stepz'\] in vision"):
        load_recipe(bad)


def test_a_training_stage_resumes_or_starts_over(tmp_path):
    r = load_recipe(RECIPES / "tiny-cpu.yaml")
    calls = []

    class _Ctx:  # records the vidspec calls instead of running them
        recipe, layout = r, Layout(tmp_path)

        def call(self, *args):
            calls.append(args)

    stage = next(s for s in plan(r, Layout(tmp_path)) if s.name == "target")
    run = tmp_path / "runs" / "target"
    (run / "checkpoints").mkdir(parents=True)
    (run / "metrics.jsonl").write_text("{}\n")
    stage.run(_Ctx())  # no checkpoint: the partial run folder goes, and the stage starts afresh
    assert not run.exists() and "--ckpt_path" not in calls[0] and calls[1][0] == "export"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.ckpt").write_bytes(b"")
    stage.run(_Ctx())
    assert calls[2][-2:] == ("--ckpt_path", "last")
