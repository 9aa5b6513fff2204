"""Test helpers: a tiny video caption/MCQ dataset on disk in SynthVid's schema, tiny recipes, and a callback
that stops a run at a given step.

Used by this package's tests and the cross-package tests; nothing here runs at import time.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import yaml

COLOURS = {"red": (230, 40, 40), "green": (40, 200, 60), "blue": (40, 70, 230), "yellow": (240, 220, 30)}


def write_tiny_dataset(root: Path, frames: int = 4) -> Path:
    """Four moving-square videos with captions in two styles and one MCQ each, like SynthVid."""
    import datasets
    from datasets import Dataset, DatasetDict

    from vidspec.decoding.fixtures import make_moving_square_frames, write_test_video
    from vidspec.decoding.models.tiny import load_tiny_tokenizer

    datasets.disable_progress_bars()
    root.mkdir(parents=True, exist_ok=True)
    (root / "videos").mkdir(exist_ok=True)
    captions, mcq = [], []
    for i, (name, rgb) in enumerate(COLOURS.items()):
        rel = f"videos/v{i}.mp4"
        write_test_video(root / rel, make_moving_square_frames(frames, 64, 64, square=20, colour=rgb), fps=4)
        for style, text in (("alpha", f"A {name} square moves to the right."),
                            ("beta", f"The video shows a {name} square moving right.")):
            captions.append({"video": rel, "question": "Describe the video in detail.", "answer": text,
                             "style": style})
        options = [f"{letter}. {c.capitalize()}." for letter, c in zip("ABCD", COLOURS)]
        mcq.append({"video": rel, "question": "What colour is the square?", "options": options,
                    "answer": "ABCD"[i]})
    DatasetDict({"train": Dataset.from_list(captions), "validation": Dataset.from_list(captions[:2])}).save_to_disk(
        str(root))
    DatasetDict({"train": Dataset.from_list(mcq), "validation": Dataset.from_list(mcq[:1])}).save_to_disk(
        str(root / "mcq"))
    load_tiny_tokenizer().save_pretrained(str(root / "tokenizer"))
    return root


ARCH = {
    "llava-ov": {"family": "llava-ov", "hidden_size": 64, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2,
                 "vision_hidden_size": 64, "vision_layers": 2, "vision_heads": 2, "image_size": 56,
                 "patch_size": 14},
    "qwen2.5-vl": {"family": "qwen2.5-vl", "hidden_size": 64, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2,
                   "vision_hidden_size": 64, "vision_layers": 2, "vision_heads": 2, "patch_size": 14},
}
QWEN_OPTIONS = {"min_pixels": 56 * 56, "max_pixels": 56 * 56}


def tiny_recipe(out: Path, dataset: Path, family: str = "llava-ov", max_steps: int = 4, every: int = 2,
                **data) -> Path:
    """A recipe training a tiny model of ``family`` on ``dataset`` into ``out``; returns its path."""
    out.mkdir(parents=True, exist_ok=True)
    recipe = {
        "seed_everything": 0,
        "trainer": {
            "accelerator": "cpu", "devices": 1, "max_steps": max_steps, "log_every_n_steps": 1,
            "limit_val_batches": 0, "num_sanity_val_steps": 0, "enable_progress_bar": False,
            "enable_model_summary": False, "default_root_dir": str(out),
            "logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                       "init_args": {"save_dir": str(out), "name": "", "version": ""}},
        },
        "checkpoint": {"dirpath": str(out / "checkpoints"), "every_n_train_steps": every, "save_top_k": -1},
        "model": {
            "class_path": "vidspec.draft_training.sft.VLMSFTModule",
            "init_args": {
                "tokenizer": str(dataset / "tokenizer"), "arch": ARCH[family], "max_frames": 4,
                "adapter_options": QWEN_OPTIONS if family == "qwen2.5-vl" else None,
                "optim": {"lr": 3e-3, "warmup_steps": 2},
            },
        },
        "data": {"path": str(dataset), "tables": [".", "mcq"], "batch_size": 2, "num_workers": 0,
                 "caption_styles": ["alpha"], **data},
    }
    path = out / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


class StopAtStep(L.Callback):
    """Stops training after optimizer step ``step`` the way ``trainer.max_time`` does (it sets
    ``trainer.should_stop``), at a known step: ``--trainer.callbacks+=vidspec.draft_training.testing.StopAtStep
    --trainer.callbacks.step=N``."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, *args, **kwargs) -> None:
        if trainer.global_step >= self.step:
            trainer.should_stop = True


class RecordSparrowStep(L.Callback):
    """Records, on rank zero, what a Sparrow training step under the run's strategy and precision fed the draft
    and read from the target, next to the same computed as at inference (outside the strategy's forward, no
    autocast, float32 rotary buffers), and the gradient norm after clipping; writes ``out`` (JSON) at the end.

    Used by the recipe test: ``--trainer.callbacks+=vidspec.draft_training.testing.RecordSparrowStep``.
    """

    def __init__(self, out: str):
        self.out = out
        self.rows: list[dict] = []

    def on_train_start(self, trainer, pl_module) -> None:
        import torch

        seen: dict = {}
        self._seen = seen
        features, draft_batch = pl_module.target_features, pl_module.draft_batch
        clip = pl_module.configure_gradient_clipping

        def rec_features(batch, **kw):
            out = features(batch, **kw)
            if "features" not in seen:  # the first step's
                seen["features"] = {k: v.detach().float().clone() for k, v in out.items()}
                seen["batch"] = batch
            return out

        def rec_draft_batch(batch, feats):
            db = draft_batch(batch, feats)
            if "positions" not in seen:
                seen["positions"] = db.positions.clone()
            return db

        def rec_rotary(mod, args):
            seen.setdefault("inv_freq_dtype", str(mod.inv_freq.dtype))
            seen.setdefault("inv_freq", mod.inv_freq.detach().clone())

        def rec_clip(optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
            clip(optimizer, gradient_clip_val=gradient_clip_val, gradient_clip_algorithm=gradient_clip_algorithm)
            from torch.distributed.fsdp import FullyShardedDataParallel

            wrapped = trainer.strategy.model
            if isinstance(wrapped, FullyShardedDataParallel):
                norm = float(wrapped.clip_grad_norm_(1e30))  # the norm over all shards, nothing scaled
            else:
                grads = [p.grad for p in pl_module.draft.parameters() if p.grad is not None]
                norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads])))
            seen.setdefault("grad_norms", []).append(norm)

        pl_module.target_features, pl_module.draft_batch = rec_features, rec_draft_batch
        pl_module.configure_gradient_clipping = rec_clip
        self._hook = pl_module.draft.rotary.register_forward_pre_hook(rec_rotary)
        self._originals = (features, draft_batch)

    def on_train_end(self, trainer, pl_module) -> None:
        import json

        import torch

        from vidspec.decoding.drafters.sparrow import _import

        self._hook.remove()
        features, draft_batch = self._originals
        seen = self._seen
        ref = features(seen["batch"])
        diff = max(float((ref[k].float() - seen["features"][k]).abs().max()) for k in ("penult", "mid", "last"))
        fresh = _import(pl_module.draft.config.rotary_class)(config=pl_module.draft.text_config)
        row = {
            "strategy": type(trainer.strategy).__name__, "precision": trainer.precision,
            "world_size": trainer.world_size, "global_step": trainer.global_step,
            "gradient_clip_val": trainer.gradient_clip_val, "grad_norms_after_clip": seen.get("grad_norms", []),
            "inv_freq_dtype": seen["inv_freq_dtype"],
            "inv_freq_equal": bool(torch.equal(seen["inv_freq"].cpu(), fresh.inv_freq)),
            "feature_max_abs_diff": diff,
            "positions_equal": bool(torch.equal(draft_batch(seen["batch"], ref).positions, seen["positions"])),
            "target_positions_equal": bool(torch.equal(ref["positions"], seen["features"]["positions"].to(
                ref["positions"].dtype))),
        }
        if trainer.is_global_zero:
            with open(self.out, "w") as f:
                json.dump(row, f)
