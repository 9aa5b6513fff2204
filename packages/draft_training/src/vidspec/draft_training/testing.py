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
