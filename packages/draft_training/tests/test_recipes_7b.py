"""Each 7B Sparrow recipe's strategy, precision and gradient clipping take optimizer steps in 2 CPU processes.

The recipes are run as written except for what needs GPUs and hub weights: the accelerator (CPU, gloo), the
target (the tiny model of the same family), the data (a tiny set) and the step count. A callback records, in a
training step under the recipe's strategy, the draft's positions, its RoPE buffer and the target's features, and
the test checks they equal those computed as at inference; and that the gradient norm after clipping is at most
``gradient_clip_val``.

What the CPU cannot show: FSDP's bf16 parameter all-gathers and the autocast context of Lightning's FSDP
precision plugin are CUDA-only (on CPU the plugin's ``autocast("cuda")`` does nothing), so the draft computes in
float32 here; the buffer dtype, the uncast target inputs and the sharded clipping, which are what broke, are the
same code paths on CPU. The 7B-shape runs on one GPU are benchmarks/train_7b.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
RECIPES = {"sparrow-qwen2.5-vl-7b.yaml": "tiny-qwen2.5-vl", "sparrow-llava-ov-7b.yaml": "tiny-llava-ov"}

SCRIPT = """
import sys
from vidspec.draft_training.cli import run_cli

if __name__ == "__main__":
    for path in sys.argv[1:]:  # one process group for every recipe: the start-up is the slow part
        run_cli(["fit", "--config", path])
"""


def _tiny(recipe: str, target: str, strategy, data: Path, out: Path) -> Path:
    cfg = yaml.safe_load((ROOT / "configs" / "train" / recipe).read_text())
    tr = cfg["trainer"]
    tr.update({"accelerator": "cpu", "devices": 2, "max_steps": 3, "max_epochs": None, "val_check_interval": None,
               "limit_val_batches": 0, "log_every_n_steps": 1, "default_root_dir": str(out),
               "enable_model_summary": False})
    if strategy is not None:
        tr["strategy"] = strategy
    tr["logger"]["init_args"]["save_dir"] = str(out)
    tr["callbacks"] = [{"class_path": "vidspec.draft_training.testing.RecordSparrowStep",
                        "init_args": {"out": str(out / "record.json")}}]
    cfg["checkpoint"] = {"every_n_train_steps": 1000, "dirpath": str(out / "checkpoints")}
    cfg["model"]["init_args"].update({"target": target, "max_frames": 4})
    cfg["model"]["init_args"]["optim"] = {**cfg["model"]["init_args"]["optim"], "lr": 1e-2, "warmup_steps": 0}
    cfg["data"].update({"path": str(data), "batch_size": 2, "num_workers": 0, "val_split": None})
    cfg["data"].pop("max_val_samples", None)
    path = out / "recipe.yaml"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    sys.path.insert(0, str(Path(__file__).parent))
    from test_sparrow_train import write_dataset

    return write_dataset(tmp_path_factory.mktemp("recipe7b-data"), n_train=4, n_val=1)


def test_7b_recipes_take_steps_under_ddp_in_two_processes(data, tmp_path):
    """Both recipes, with their precision and clipping, under DDP (2 gloo processes, one process group)."""
    paths = [_tiny(r, RECIPES[r], "ddp", data, tmp_path / r) for r in sorted(RECIPES)]
    script = tmp_path / "fit.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, str(script), *map(str, paths)], capture_output=True, text=True,
                          timeout=600, env=env, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-4000:]
    for r in sorted(RECIPES):
        rec = json.loads((tmp_path / r / "record.json").read_text())
        assert rec["strategy"] == "DDPStrategy" and rec["world_size"] == 2 and rec["precision"] == "bf16-mixed", r
        assert rec["global_step"] == 3
        # what the draft and the target saw inside the bf16-mixed step equals what inference computes
        assert rec["inv_freq_dtype"] == "torch.float32" and rec["inv_freq_equal"], r
        assert rec["positions_equal"] and rec["target_positions_equal"], r
        assert rec["feature_max_abs_diff"] == 0.0, r
        assert rec["gradient_clip_val"] == 0.5 and len(rec["grad_norms_after_clip"]) == 3
        assert max(rec["grad_norms_after_clip"]) <= 0.5 * 1.001, r


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_7b_recipe_fsdp_settings(recipe, data, tmp_path):
    """FSDP as the recipe configures it. torch's FSDP refuses to wrap a module without an accelerator ("FSDP needs
    a non-CPU accelerator device"), so on CPU this checks the pieces the GPU run relies on: the recipe builds the
    DraftFSDPStrategy with float32 buffers, uncast forward inputs and float32 gradient reduction, and norm clipping
    goes to the root FSDP module's ``clip_grad_norm_`` (Lightning's own path raises under FSDP)."""
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel

    from vidspec.draft_training.cli import run_cli
    from vidspec.draft_training.strategies import DraftFSDPStrategy

    path = _tiny(recipe, RECIPES[recipe], None, data, tmp_path / "run")
    cli = run_cli(["--config", str(path)], run=False)
    strategy = cli.trainer.strategy
    assert isinstance(strategy, DraftFSDPStrategy) and cli.trainer.gradient_clip_val == 0.5
    mp = strategy.mixed_precision_config
    assert mp.param_dtype == torch.bfloat16 and mp.buffer_dtype == torch.float32
    assert mp.reduce_dtype == torch.float32
    assert not mp.cast_root_forward_inputs and not mp.cast_forward_inputs

    calls = []

    class RootFSDP(FullyShardedDataParallel):
        def clip_grad_norm_(self, max_norm, norm_type=2.0):
            calls.append(max_norm)

    module = cli.model
    strategy.model = object.__new__(RootFSDP)  # stands for the wrapped root; only its clip_grad_norm_ is called
    module.trainer = cli.trainer
    module.configure_gradient_clipping(None, gradient_clip_val=0.5, gradient_clip_algorithm="norm")
    assert calls == [0.5]


@pytest.mark.parametrize("name", ["tiny-qwen2.5-vl", "tiny-llava-ov"])
def test_mtp_needs_no_dense_mask(name, data):
    """Rows with fewer visual states than the batch's longest: the module's compact causal layout (no S x S mask)
    gives the draft's layer the same outputs as the explicit (B, 1, S, S) mask of the slot layout."""
    import torch
    from test_sparrow_train import a_batch

    from vidspec.draft_training.sparrow import SparrowDistillModule

    torch.manual_seed(0)
    m = SparrowDistillModule(target=name, loss={"mtp_steps": 2})
    b = a_batch(m, data, 2)
    db = m.draft_batch(b, m.target_features(b))
    db.vis_valid[0, -3:] = False  # row 0 now has padding between its visual states and its text
    valid = torch.cat([db.vis_valid, db.txt_valid], 1)
    S = valid.shape[1]
    allowed = ((torch.ones(S, S, dtype=torch.bool).tril()[None] & valid[:, None, :])
               | torch.eye(S, dtype=torch.bool)[None])[:, None]
    x = torch.cat([db.vis, m.draft.fuse(db.embeds, db.h_prev)], 1)
    ref = m.draft.run_layer(x, db.positions, allowed)
    seen = []
    m._run = lambda x, pos, allowed: (seen.append(allowed), m.draft.run_layer(x, pos, torch.ones(
        x.shape[1], x.shape[1], dtype=torch.bool).tril()[None, None]))[1]
    m.loss_cfg = type(m.loss_cfg)(mtp_steps=1)
    captured = {}
    logits = m.draft.logits
    m.draft.logits = lambda h: (captured.setdefault("h", h), logits(h))[1]
    m.mtp(db)
    assert seen == [None]  # no mask tensor for the SDPA layer
    got = captured["h"]
    torch.testing.assert_close(got, ref[:, db.vis.shape[1]:][db.sel], rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="FSDP needs a CUDA device")
def test_7b_recipe_fsdp_step_on_one_gpu(data, tmp_path):
    """On a GPU: each recipe's DraftFSDPStrategy as written (1 process) takes its steps with clipping, and the step
    sees inference's positions, a float32 RoPE buffer and the target's own features."""
    for recipe, target in sorted(RECIPES.items()):
        out = tmp_path / recipe
        path = _tiny(recipe, target, None, data, out)
        cfg = yaml.safe_load(path.read_text())
        cfg["trainer"].update({"accelerator": "gpu", "devices": 1})
        path.write_text(yaml.safe_dump(cfg))
        script = tmp_path / "fit.py"
        script.write_text(SCRIPT)
        proc = subprocess.run([sys.executable, str(script), str(path)], capture_output=True, text=True, timeout=600,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=str(tmp_path))
        assert proc.returncode == 0, proc.stderr[-4000:]
        rec = json.loads((out / "record.json").read_text())
        assert rec["strategy"] == "DraftFSDPStrategy" and rec["global_step"] == 3
        assert rec["inv_freq_dtype"] == "torch.float32" and rec["inv_freq_equal"] and rec["positions_equal"]
        assert rec["target_positions_equal"] and rec["feature_max_abs_diff"] == 0.0
        assert max(rec["grad_norms_after_clip"]) <= 0.5 * 1.001
