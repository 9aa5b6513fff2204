"""The draft VLM recipe in LVSpec's proportions (configs/train/synthvid-draft-qwen2.5-vl-fifth-gpu.yaml) on CPU.

The recipe is run as written except for what needs a GPU or the full SynthVid set: the accelerator and precision
(CPU, float32), the data (the four-video tiny set), the frame budget (its videos have 4 frames), the step count and
the folders. What the CPU run shows: the recipe parses, builds the model its header describes (a fifth of the
target, counted as the header counts it) and takes optimizer steps. The alternative its header names, a draft whose
tower starts from the target's first block (``vidspec tower-pretrain --extract-from``), is built too: its tower
holds the target's tensors before any step.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from vidspec.decoding.errors import ConfigError
from vidspec.draft_training.testbed.vision_pretrain import TOWER_FILE, extract_tower, tower_pretrain_main

ROOT = Path(__file__).resolve().parents[3]
RECIPE = ROOT / "configs" / "train" / "synthvid-draft-qwen2.5-vl-fifth-gpu.yaml"
TARGET = ROOT / "data" / "releases" / "qwen2.5-vl" / "synthvid-target"


def _tiny(tiny_dataset: Path, out: Path, **init) -> Path:
    cfg = yaml.safe_load(RECIPE.read_text())
    tr = cfg["trainer"]
    tr.update({"accelerator": "cpu", "precision": "32-true", "max_steps": 2, "max_time": None,
               "val_check_interval": None, "check_val_every_n_epoch": 1, "limit_val_batches": 0,
               "log_every_n_steps": 1, "default_root_dir": str(out), "enable_model_summary": False})
    tr["logger"]["init_args"]["save_dir"] = str(out)
    cfg["checkpoint"] = {"every_n_train_steps": 1000, "dirpath": str(out / "checkpoints")}
    model = cfg["model"]["init_args"]
    model.update({"tokenizer": str(tiny_dataset / "tokenizer"), "max_frames": 4, **init})
    cfg["data"].update({"path": str(tiny_dataset), "tables": [".", "mcq"], "batch_size": 2, "num_workers": 0,
                        "frame_cache": None})
    path = out / "recipe.yaml"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg))
    return path


def _count(model) -> int:
    """Parameters with SynthVid's 929-token vocabulary (the tiny set's tokenizer is smaller), tower included."""
    vocab = model.model.config.text_config.vocab_size
    return sum(p.numel() for p in model.parameters()) + (929 - vocab) * 2 * model.model.config.text_config.hidden_size


def test_fifth_recipe_builds_a_fifth_of_the_target_and_takes_two_steps(tiny_dataset, tmp_path):
    from vidspec.draft_training.cli import run_cli

    path = _tiny(tiny_dataset, tmp_path / "run")
    cli = run_cli(["fit", "--config", str(path)])
    assert cli.trainer.global_step == 2
    assert torch.isfinite(torch.tensor(float(cli.trainer.callback_metrics["train/loss"])))
    model = cli.model
    assert model.family == "qwen2.5-vl" and model.hparams["arch"]["num_layers"] == 2
    assert _count(model) == 773_568  # the header's count (the export's manifest says the same)
    assert 0.18 <= _count(model) / 3_908_224 <= 0.22
    visual = sum(p.numel() for p in model.vision_tower.parameters())
    assert visual == 206_656 and all(p.requires_grad for p in model.vision_tower.parameters())


def test_the_alternative_starts_from_the_target_tower(tiny_dataset, tmp_path):
    from safetensors.torch import load_file

    from vidspec.draft_training.cli import run_cli

    tower = tmp_path / "tower"
    assert tower_pretrain_main(["--extract-from", str(TARGET), "--keep-layers", "1", "--out", str(tower)]) == 0
    arch = {**yaml.safe_load(RECIPE.read_text())["model"]["init_args"]["arch"], "num_layers": 1,
            "vision_hidden_size": 128, "vision_layers": 1, "vision_heads": 4, "vision_init_std": None}
    path = _tiny(tiny_dataset, tmp_path / "run", arch=arch, vision_init=str(tower), freeze_vision=True)
    built = run_cli(["--config", str(path)], run=False).model
    target = {k.split("visual.", 1)[1]: v for k, v in load_file(str(TARGET / "model.safetensors")).items()
              if "visual." in k}
    own = built.vision_tower.state_dict()
    assert set(own) == {k for k in target if not k.startswith("blocks.") or k.startswith("blocks.0.")}
    for k, v in own.items():  # the target's first block, patch embedding and merger
        assert torch.equal(v, target[k].float()), k
    assert _count(built) == 945_280  # 24% of the target
    trainable = {n.split(".")[0] for n, p in built.vision_tower.named_parameters() if p.requires_grad}
    assert trainable == {"merger"}  # frozen but for the merger, as the target's own SFT ran


def test_extract_tower_keeps_the_first_blocks_and_refuses_other_depths(tmp_path):
    from safetensors.torch import load_file

    out = extract_tower(TARGET, tmp_path / "t2", layers=2)
    keys = set(load_file(str(out / TOWER_FILE)))
    assert {k.split(".")[1] for k in keys if k.startswith("blocks.")} == {"0", "1"}
    assert any(k.startswith("merger.") for k in keys) and any(k.startswith("patch_embed.") for k in keys)
    assert len(set(load_file(str(extract_tower(TARGET, tmp_path / "t4") / TOWER_FILE)))) > len(keys)
    with pytest.raises(ConfigError, match="1..4"):
        extract_tower(TARGET, tmp_path / "t5", layers=5)
    with pytest.raises(ConfigError, match="no model.safetensors"):
        extract_tower(tmp_path, tmp_path / "t6")
