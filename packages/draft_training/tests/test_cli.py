"""`vidspec train` and `vidspec export`: recipes parse, bad keys exit 2, exact resume, export round trip."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from vidspec.decoding.cli import main as vidspec
from vidspec.draft_training.callbacks import read_metrics
from vidspec.draft_training.cli import parse_recipe
from vidspec.draft_training.testing import tiny_recipe

REPO = Path(__file__).resolve().parents[3]
RECIPES = sorted((REPO / "configs" / "train").glob("*.yaml"))


def _losses(run: Path) -> dict[int, float]:
    # A resumed run appends to the same file; the last record of a step wins.
    return {r["step"]: r["train/loss"] for r in read_metrics(run / "metrics.jsonl") if "train/loss" in r}


@pytest.mark.parametrize("recipe", RECIPES, ids=[p.name for p in RECIPES])
def test_every_recipe_parses(recipe):
    cfg = parse_recipe(str(recipe))
    assert cfg.fit.model.class_path
    text = recipe.read_text()
    assert text.startswith("#") and "vidspec train fit --config configs/train/" + recipe.name in text


def test_found_the_recipes():
    names = {p.name for p in RECIPES}
    assert {"synthvid-target-cpu.yaml", "synthvid-draft-cpu.yaml", "synthvid-target-gpu.yaml",
            "synthvid-draft-gpu.yaml"} <= names


@pytest.mark.parametrize("where,key", [("model", "bogus_width"), ("trainer", "max_stepz"), ("data", "batchsize")])
def test_wrong_key_exits_2_naming_it(tmp_path, tiny_dataset, capsys, where, key):
    path = tiny_recipe(tmp_path, tiny_dataset)
    recipe = yaml.safe_load(path.read_text())
    section = recipe["model"]["init_args"] if where == "model" else recipe[where]
    section[key] = 1
    path.write_text(yaml.safe_dump(recipe))
    assert vidspec(["train", "fit", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and key in err[0], err


def test_bad_value_exits_2(tmp_path, tiny_dataset, capsys):
    path = tiny_recipe(tmp_path, tiny_dataset)
    code = vidspec(["train", "fit", "--config", str(path), "--model.init_args.arch.family", "gpt2"])
    assert code == 2 and "family" in capsys.readouterr().err


def test_val_check_interval_over_an_epoch_exits_2_in_one_line(tmp_path, tiny_dataset, capsys):
    # 8 rows / batch 2 = 4 batches an epoch; Lightning's ValueError comes from inside fit.
    path = tiny_recipe(tmp_path, tiny_dataset)
    code = vidspec(["train", "fit", "--config", str(path), "--trainer.limit_val_batches", "1",
                    "--trainer.val_check_interval", "10"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "trainer.val_check_interval=10" in lines[0] and "4 training batches" in lines[0], lines
    assert "check_val_every_n_epoch=null" in lines[0], lines
    assert not (tmp_path / "checkpoints").exists()


def test_module_entry_point_gives_the_same_one_line(tmp_path, tiny_dataset):
    # `python -m vidspec.draft_training.cli` is what torchrun launches (see the recipes' headers).
    import subprocess
    import sys

    path = tiny_recipe(tmp_path, tiny_dataset)
    proc = subprocess.run([sys.executable, "-m", "vidspec.draft_training.cli", "fit", "--config", str(path),
                           "--trainer.limit_val_batches", "1", "--trainer.val_check_interval", "10"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "vidspec train: error: trainer.val_check_interval=10" in proc.stderr.strip().splitlines()[-1], proc.stderr


def test_only_the_val_check_interval_value_error_becomes_a_config_error():
    from vidspec.draft_training.cli import _val_check_interval_error

    lightning = ValueError(" `val_check_interval` (10) must be less than or equal to the number of the training "
                           "batches (4). If you want to disable validation set `limit_val_batches` to 0.0 instead.")
    assert _val_check_interval_error(lightning).startswith("trainer.val_check_interval=10 is larger than the 4 ")
    assert _val_check_interval_error(ValueError("`val_check_interval` should be an integer")) is None
    assert _val_check_interval_error(ValueError("math domain error")) is None
    assert _val_check_interval_error(TypeError(str(lightning))) is None


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, tiny_dataset):
    out = tmp_path_factory.mktemp("run_a")
    assert vidspec(["train", "fit", "--config", str(tiny_recipe(out, tiny_dataset, max_steps=6, every=3))]) == 0
    return out


#: Length augmentation under a frame budget: 4-frame clips, factors 1, 2, 4 in turn, 8 frames a batch:
#: batches of 2, 1 and 1 clips, so 8 rows make 6 batches an epoch.
FRAME_BUDGET = {"frame_repeat": [1, 2, 4], "frame_budget": 8}


@pytest.mark.parametrize("data", [{}, FRAME_BUDGET], ids=["fixed_batches", "frame_budget"])
def test_killed_run_resumes_with_the_same_losses(tmp_path, tiny_dataset, request, data):
    # 8 rows / batch 2 = 4 batches an epoch (6 with the frame budget): the checkpoint at step 3 is
    # mid-epoch and the resumed run crosses into epoch 1.
    steps = 8 if data else 6
    if data:
        uninterrupted = tmp_path / "uninterrupted"
        assert vidspec(["train", "fit", "--config",
                        str(tiny_recipe(uninterrupted, tiny_dataset, max_steps=steps, every=3, **data))]) == 0
    else:
        uninterrupted = request.getfixturevalue("uninterrupted")
    run = tmp_path / "killed"
    recipe = str(tiny_recipe(run, tiny_dataset, max_steps=steps, every=3, **data))
    with pytest.raises(RuntimeError, match="simulated crash"):
        vidspec(["train", "fit", "--config", recipe, "--fail_at_step", "5"])
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert vidspec(["train", "fit", "--config", recipe, "--ckpt_path", "last"]) == 0
    want, got = _losses(uninterrupted), _losses(run)
    assert sorted(want) == sorted(got) == list(range(1, steps + 1))
    for step in want:
        assert got[step] == pytest.approx(want[step], abs=1e-6), (step, got, want)
    assert (run / "config.yaml").is_file()  # the resolved config beside the outputs
    if data:  # the batches of epoch 0 (steps 1-6) are the budget's: 2, 1 and 1 clips, twice
        samples = {r["step"]: r["train/samples"] for r in read_metrics(run / "metrics.jsonl") if "train/loss" in r}
        assert sorted(samples[s] for s in range(1, 7)) == [1, 1, 1, 1, 2, 2]


STOP_AT_5 = {"max_steps": ["--trainer.max_steps", "5"],
             "should_stop": ["--trainer.callbacks+=vidspec.draft_training.testing.StopAtStep",
                             "--trainer.callbacks.step=5"]}


@pytest.mark.parametrize("stop", STOP_AT_5.values(), ids=STOP_AT_5.keys())
def test_a_run_stopped_off_the_checkpoint_interval_keeps_its_last_step_and_resumes(tmp_path, tiny_dataset,
                                                                                    uninterrupted, stop):
    # Checkpoints every 3 steps; the run stops at step 5, by max_steps or as max_time stops one, with the
    # schedule of the uninterrupted 6-step run. last.ckpt holds step 5, its release says so, and going on to
    # step 6 from it gives the uninterrupted run's losses.
    import torch

    run = tmp_path / "stopped"
    recipe = str(tiny_recipe(run, tiny_dataset, max_steps=6, every=3))
    schedule = ["--model.init_args.optim.total_steps", "6"]
    assert vidspec(["train", "fit", "--config", recipe, *schedule, *stop]) == 0
    last = run / "checkpoints" / "last.ckpt"
    assert torch.load(last, map_location="cpu", weights_only=False)["global_step"] == 5
    assert vidspec(["export", "--ckpt", str(last), "--out", str(tmp_path / "release")]) == 0
    assert json.loads((tmp_path / "release" / "manifest.json").read_text())["metrics"]["global_step"] == 5
    assert vidspec(["train", "fit", "--config", recipe, *schedule, "--ckpt_path", "last"]) == 0
    want, got = _losses(uninterrupted), _losses(run)
    assert sorted(got) == list(range(1, 7))
    for step in want:
        assert got[step] == pytest.approx(want[step], abs=1e-6), (step, got, want)


def test_a_run_that_ends_before_its_schedule_warns_once(tmp_path, tiny_dataset, caplog):
    recipe = str(tiny_recipe(tmp_path, tiny_dataset, max_steps=3, every=3))
    with caplog.at_level("WARNING", logger="vidspec.draft_training.callbacks"):
        assert vidspec(["train", "fit", "--config", recipe, "--model.init_args.optim.total_steps", "10"]) == 0
    warned = [r.getMessage() for r in caplog.records if "learning-rate schedule" in r.getMessage()]
    assert len(warned) == 1 and "step 3 of its 10-step" in warned[0], warned
    share = int(warned[0].split("learning rate at ")[1].split("%")[0])
    assert 50 < share < 100  # warmup 2, cosine over 8 more steps: one step into it
    caplog.clear()
    with caplog.at_level("WARNING", logger="vidspec.draft_training.callbacks"):  # the schedule ran to its end
        assert vidspec(["train", "fit", "--config", str(tiny_recipe(tmp_path / "full", tiny_dataset, max_steps=3,
                                                                    every=3))]) == 0
    assert not [r for r in caplog.records if "learning-rate schedule" in r.getMessage()]


def test_export_round_trip_is_token_identical(tmp_path, uninterrupted, tiny_dataset, capsys):
    from vidspec.decoding.methods import build_decoder
    from vidspec.decoding.models import load_target
    from vidspec.decoding.types import Request
    from vidspec.draft_training.export import load_module

    ckpt = uninterrupted / "checkpoints" / "last.ckpt"
    out = tmp_path / "release"
    assert vidspec(["export", "--ckpt", str(ckpt), "--out", str(out)]) == 0
    for f in ("config.json", "model.safetensors", "tokenizer.json", "vidspec.json", "manifest.json", "README.md"):
        assert (out / f).is_file(), f
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["fingerprint"] == hashlib.sha256(b"model.safetensors\0" + (out / "model.safetensors").read_bytes()).hexdigest()
    assert manifest["git_sha"] and manifest["metrics"]["global_step"] == 6 and "train/loss" in manifest["metrics"]
    assert manifest["training_config"]["model"]["class_path"].endswith("VLMSFTModule")
    assert manifest["data_world_version"] is None  # not a SynthVid set: no world version to record
    assert json.loads((out / "vidspec.json").read_text())["max_frames"] == 4
    assert "initialised from" not in (out / "README.md").read_text()  # trained from config, not continued

    module, _ = load_module(ckpt)
    video = str(tiny_dataset / "videos" / "v1.mp4")
    results = []
    for target in (module.as_target(), load_target(str(out))):
        request = Request(prompt="Describe the video in detail.", clip=target.read_video(video))
        results.append(build_decoder("ar", target=target).generate(request, max_new_tokens=12).token_ids)
    assert results[0] == results[1] and len(results[0]) > 0
    capsys.readouterr()
    assert vidspec(["generate", "--target", str(out), "--video", video, "--max-new-tokens", "12", "--json"]) == 0
    assert tuple(json.loads(capsys.readouterr().out)["token_ids"]) == results[0]

    assert vidspec(["export", "--ckpt", str(ckpt), "--out", str(out)]) == 2  # no silent overwrite
    assert vidspec(["export", "--ckpt", str(tmp_path / "nope.ckpt"), "--out", str(tmp_path / "x")]) == 2
    # --out a file, or under a file: one line, not a NotADirectoryError traceback.
    assert vidspec(["export", "--ckpt", str(ckpt), "--out", str(out / "README.md")]) == 2
    assert vidspec(["export", "--ckpt", str(ckpt), "--out", str(out / "README.md" / "x")]) == 2


def test_export_takes_the_validation_run_after_the_last_checkpoint(tmp_path, tiny_dataset):
    # Validation every 2 steps of 4: last.ckpt is written after step 4's batch and before step 4's validation, so
    # the checkpoint holds step 2's val/loss. The release's metrics are the run's at step 4, from metrics.jsonl.
    import torch

    run = tmp_path / "run"
    recipe = str(tiny_recipe(run, tiny_dataset, max_steps=4, every=4))
    assert vidspec(["train", "fit", "--config", recipe, "--trainer.limit_val_batches", "1",
                    "--trainer.val_check_interval", "2"]) == 0
    val = {r["step"]: r["val/loss"] for r in read_metrics(run / "metrics.jsonl") if "val/loss" in r}
    assert sorted(val) == [2, 4] and val[2] != val[4]
    ckpt = run / "checkpoints" / "last.ckpt"
    info = torch.load(ckpt, map_location="cpu", weights_only=False)["vidspec"]
    assert info["metrics"]["val/loss"] == pytest.approx(val[2])  # what the checkpoint alone would report
    assert info["metrics_file"] == str((run / "metrics.jsonl").absolute())
    assert vidspec(["export", "--ckpt", str(ckpt), "--out", str(tmp_path / "release")]) == 0
    manifest = json.loads((tmp_path / "release" / "manifest.json").read_text())
    assert manifest["metrics"]["val/loss"] == pytest.approx(val[4]) and manifest["metrics"]["global_step"] == 4
    assert f"val/loss: {val[4]:.4g}" in (tmp_path / "release" / "README.md").read_text()
    # Without the file (a moved run, or a checkpoint from before it was recorded) the checkpoint's figures stand.
    (run / "metrics.jsonl").rename(run / "moved.jsonl")
    assert vidspec(["export", "--ckpt", str(ckpt), "--out", str(tmp_path / "release2")]) == 0
    manifest = json.loads((tmp_path / "release2" / "manifest.json").read_text())
    assert manifest["metrics"]["val/loss"] == pytest.approx(val[2])


def test_export_in_bfloat16_is_half_the_size_and_decodes_as_its_rounded_weights(tmp_path, uninterrupted, tiny_dataset,
                                                                                  capsys):
    import torch
    from safetensors import safe_open

    from vidspec.decoding.methods import build_decoder
    from vidspec.decoding.models import load_target
    from vidspec.decoding.types import Request
    from vidspec.draft_training.export import load_module

    ckpt = uninterrupted / "checkpoints" / "last.ckpt"
    full, half = tmp_path / "f32", tmp_path / "bf16"
    assert vidspec(["export", "--ckpt", str(ckpt), "--out", str(full)]) == 0
    assert vidspec(["export", "--ckpt", str(ckpt), "--out", str(half), "--dtype", "bfloat16"]) == 0
    with safe_open(str(half / "model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}
    ratio = (half / "model.safetensors").stat().st_size / (full / "model.safetensors").stat().st_size
    assert 0.45 < ratio < 0.55, ratio
    assert json.loads((half / "manifest.json").read_text())["weights_dtype"] == "bfloat16"
    assert json.loads((full / "manifest.json").read_text())["weights_dtype"] == "float32"
    # loaded in float32 (the CPU default), it is the trained model with its weights rounded to bfloat16: token
    # for token the same greedy output as the checkpoint's module after that rounding
    module, _ = load_module(ckpt)
    module.model.to(torch.bfloat16).to(torch.float32)
    video = str(tiny_dataset / "videos" / "v1.mp4")
    results = []
    for target in (module.as_target(), load_target(str(half))):
        assert next(target.model.parameters()).dtype == torch.float32
        request = Request(prompt="Describe the video in detail.", clip=target.read_video(video))
        results.append(build_decoder("ar", target=target).generate(request, max_new_tokens=12).token_ids)
    assert results[0] == results[1] and len(results[0]) > 0
    capsys.readouterr()
    assert vidspec(["export", "--ckpt", str(ckpt), "--out", str(tmp_path / "x"), "--dtype", "int8"]) == 2
    err = capsys.readouterr().err
    assert "--dtype 'int8'" in err and "bfloat16" in err and not (tmp_path / "x").exists()


@pytest.mark.parametrize("content,words", [
    ({"vidspec": {"module": "no_such_pkg.mod.Module"}, "state_dict": {}}, ["cannot import", "no_such_pkg.mod.Module"]),
    ({"vidspec": {"module": "vidspec.draft_training.sft.NoSuchModule"}, "state_dict": {}},
     ["does not exist", "NoSuchModule"]),
    ({"vidspec": {"module": "NoDots"}, "state_dict": {}}, ["NoDots", "not a dotted class path"]),
    ({"vidspec": "x"}, ["not a vidspec training checkpoint"]),
    ({"vidspec": {"module": "vidspec.draft_training.sft.VLMSFTModule"}, "state_dict": {},
      "hyper_parameters": {"bogus": 1}}, ["cannot rebuild", "bogus"]),
    ({"vidspec": {"module": "vidspec.draft_training.sft.VLMSFTModule"}}, ["no 'state_dict'"]),
    (b"not a checkpoint\n", ["cannot read checkpoint"]),
    (b"", ["cannot read checkpoint"]),
])
def test_export_of_a_foreign_checkpoint_is_one_line(tmp_path, capsys, content, words):
    import torch

    ckpt = tmp_path / "x.ckpt"
    if isinstance(content, bytes):
        ckpt.write_bytes(content)
    else:
        torch.save(content, ckpt)
    assert vidspec(["export", "--ckpt", str(ckpt), "--out", str(tmp_path / "release")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(ckpt) in err[0] and all(w in err[0] for w in words), err
    assert not (tmp_path / "release").exists()


def test_export_of_a_diverged_checkpoint_is_one_line(tmp_path, uninterrupted, capsys):
    """A checkpoint whose weights hold NaN (a run that diverged) is refused, not released as garbage."""
    import torch

    ckpt = torch.load(uninterrupted / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    name = next(k for k, v in ckpt["state_dict"].items() if v.is_floating_point() and v.ndim == 2)
    ckpt["state_dict"][name][0, 0] = float("nan")
    torch.save(ckpt, tmp_path / "diverged.ckpt")
    assert vidspec(["export", "--ckpt", str(tmp_path / "diverged.ckpt"), "--out", str(tmp_path / "release")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "NaN or infinite" in err[0] and name in err[0] and "diverged" in err[0], err
    assert not (tmp_path / "release").exists()


def test_missing_relative_tokenizer_names_the_path_and_the_current_directory(tmp_path, tiny_dataset, capsys,
                                                                             monkeypatch):
    recipe = tiny_recipe(tmp_path / "run", tiny_dataset)
    monkeypatch.chdir(tmp_path)
    rel = "data/cache/synthvid-cpu/tokenizer"
    assert vidspec(["train", "fit", "--config", str(recipe), "--model.init_args.tokenizer", rel]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert rel in err[0] and "relative to the current directory" in err[0] and str(tmp_path) in err[0], err
    assert not (tmp_path / "run" / "checkpoints").exists()

    absolute = str(tmp_path / "nope" / "tokenizer")
    assert vidspec(["train", "fit", "--config", str(recipe), "--model.init_args.tokenizer", absolute]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and absolute in err[0] and "does not exist" in err[0], err


def test_existing_relative_tokenizer_and_hub_ids_pass_the_path_check(tmp_path, tiny_dataset, monkeypatch):
    from jsonargparse import Namespace

    from vidspec.draft_training.cli import check_model_paths

    monkeypatch.chdir(tiny_dataset.parent)
    for value in (f"{tiny_dataset.name}/tokenizer", f"./{tiny_dataset.name}/tokenizer", "org/model", "model", None):
        check_model_paths(Namespace(model=Namespace(class_path="x.Y", init_args=Namespace(tokenizer=value))))


def test_release_manifests_record_the_synthvid_world_version(tmp_path):
    """A release trained on SynthVid names the world version its data was rendered in (2: the rhombus diamond)."""
    from vidspec.draft_training.export import _world_version

    (tmp_path / "synthvid.json").write_text(json.dumps({"format": "synthvid", "world_version": 2}))
    assert _world_version(str(tmp_path)) == 2
    (tmp_path / "synthvid.json").write_text(json.dumps({"format": "synthvid"}))  # made before versions were recorded
    assert _world_version(str(tmp_path)) is None
    assert _world_version(str(tmp_path / "elsewhere")) is None and _world_version(None) is None


def test_a_continued_models_card_names_the_model_it_continued():
    """A release fine-tuned from another (``init_from``) says so on its card: its step count alone would read as the
    whole training."""
    from vidspec.draft_training.export import _card

    manifest = {"name": "synthvid-target", "module": "m", "metrics": {"global_step": 400}, "git_sha": "abc",
                "data_path": "DATA", "fingerprint": "f", "init_from": "runs/gpu/releases/synthvid-target"}
    card = _card(manifest, None)
    assert "- steps: 400 (continuing the model below)" in card
    assert "- initialised from: `runs/gpu/releases/synthvid-target`" in card
    assert "initialised from" not in _card({**manifest, "init_from": None}, None)


def test_a_continued_model_keeps_the_architecture_its_start_recorded(tmp_path):
    """A model continued from a release (``init_from``, no ``arch`` of its own) records the start's architecture, which
    tools that rebuild a release's shape read."""
    from vidspec.draft_training.export import _init_arch

    start = tmp_path / "start"
    start.mkdir()
    (start / "manifest.json").write_text(json.dumps({"arch": {"num_layers": 24, "hidden_size": 128}}))
    assert _init_arch(str(start)) == {"num_layers": 24, "hidden_size": 128}
    assert _init_arch(str(tmp_path / "no-such-folder")) is None and _init_arch(None) is None
