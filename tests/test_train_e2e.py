"""Train -> export -> decode, across packages: SynthVid data, the CPU recipe, a release, `vidspec generate`.

A few training steps only: this proves the path (data on disk, recipe, checkpoint, export format,
loading by decoding), not the quality of the model (the figures stage of ``vidspec testbed build`` measures that).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vidspec.decoding.cli import main as vidspec

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def synthvid(tmp_path_factory) -> Path:
    from vidspec.evaluation.synthvid.dataset import SynthVidConfig, generate_synthvid

    out = tmp_path_factory.mktemp("sv") / "synthvid"
    cfg = SynthVidConfig(num_videos=12, seed=0, preset="easy", size="64x64", styles="alpha:1,beta:1",
                         captions_per_video=2, split="train=0.75,validation=0.25")
    return generate_synthvid(out, cfg, progress=False)


@pytest.mark.parametrize("recipe", ["synthvid-target-cpu.yaml", "synthvid-draft-cpu.yaml"])
def test_recipe_trains_exports_and_decodes(tmp_path, synthvid, recipe, capsys):
    run = tmp_path / "run"
    argv = [
        "train", "fit", "--config", str(REPO / "configs" / "train" / recipe),
        "--data.path", str(synthvid), "--model.init_args.tokenizer", str(synthvid / "tokenizer"),
        "--data.frame_cache", str(tmp_path / "frames"), "--data.num_workers", "0", "--data.batch_size", "4",
        "--trainer.max_steps", "3", "--trainer.limit_val_batches", "1", "--trainer.val_check_interval", "3",
        "--trainer.default_root_dir", str(run), "--trainer.logger.init_args.save_dir", str(run),
        "--checkpoint.dirpath", str(run / "checkpoints"), "--checkpoint.every_n_train_steps", "3",
    ]
    assert vidspec(argv) == 0
    ckpt = run / "checkpoints" / "last.ckpt"
    release = tmp_path / "release"
    assert vidspec(["export", "--ckpt", str(ckpt), "--out", str(release)]) == 0
    manifest = json.loads((release / "manifest.json").read_text())
    assert manifest["metrics"]["global_step"] == 3 and manifest["family"] == "llava-ov"
    assert manifest["data_path"] == synthvid.name  # the data set, without the machine's folders

    from datasets import load_from_disk

    row = load_from_disk(str(synthvid))["validation"][0]
    video = str(synthvid / row["video"])
    capsys.readouterr()
    assert vidspec(["generate", "--target", str(release), "--video", video, "--max-new-tokens", "16", "--json"]) == 0
    via_cli = json.loads(capsys.readouterr().out)

    from vidspec.decoding.methods import build_decoder
    from vidspec.decoding.types import Request
    from vidspec.draft_training.export import load_module

    module, _ = load_module(ckpt)
    target = module.as_target()
    request = Request(prompt=row["question"], clip=target.read_video(video))
    in_memory = build_decoder("ar", target=target).generate(request, max_new_tokens=16)
    assert list(in_memory.token_ids) == via_cli["token_ids"]


@pytest.mark.parametrize("recipe", sorted(p.name for p in (REPO / "configs" / "testbed").glob("*.yaml")))
def test_testbed_recipes_training_stages_parse(recipe, tmp_path, monkeypatch):
    """Every training stage of every testbed recipe (GPU ones included) is a valid ``vidspec train fit`` call."""
    from vidspec.draft_training.cli import parse_recipe
    from vidspec.evaluation.testbed.pipeline import Context, Layout, Training, plan
    from vidspec.evaluation.testbed.recipe import load_recipe

    monkeypatch.chdir(REPO)
    r = load_recipe(REPO / "configs" / "testbed" / recipe)
    ctx = Context(r, Layout(tmp_path))
    stages = [s for s in plan(r, ctx.layout) if isinstance(s, Training)]
    assert stages
    for stage in stages:
        args = stage.fit_args(ctx)
        assert args[:3] == ["train", "fit", "--config"]
        cfg = parse_recipe(args[3], overrides=args[4:])
        if stage.stage.max_steps is not None:
            assert cfg["fit.trainer.max_steps"] == stage.stage.max_steps
        assert cfg["fit.data.path"] == str(ctx.layout.data)
