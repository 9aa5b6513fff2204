"""Supervised pretraining of a testbed's vision tower (LLaVA-OV's SigLIP or Qwen2.5-VL's) on rendered SynthVid frames.

Real Video-LLMs start from a pretrained vision encoder; a testbed built from scratch does not, and
a from-scratch SigLIP tower learns shapes slowly when its only signal comes through the language
model's caption loss. This stage gives the tower the analogue of ImageNet pretraining: one-object
scenes of the SynthVid *training* world with their exact shape, colour and motion labels:

- shape and colour: linear read-outs of frame 0's mean-pooled tokens;
- motion: a linear read-out of all tokens of the first and last frames, which needs the tokens to
  say where the object is (what the language model later reads motion from).

The read-out heads are dropped; the tower is saved as ``tower.safetensors`` + ``tower.json`` (the
ArchConfig fields it was built from) and loaded by ``VLMSFTModule(vision_init=DIR)``.

A Qwen2.5-VL tower (``arch.family == "qwen2.5-vl"``, :class:`QwenTowerProbe`) reads frames in pairs
(its temporal patch is 2), so each scene becomes the clip [first, first, last, last]: shape and
colour are read from the first pair's merged tokens, motion from both pairs'. Its merger, which
projects into the language model's width (``arch.hidden_size``), is pretrained with it.

This module takes the frames and labels as tensors (training does not import the evaluation
package, where SynthVid lives): the testbed pipeline (``vidspec testbed build``) renders the scenes
into a scene file (:func:`load_scenes` describes it) and runs ``vidspec tower-pretrain``
(:func:`pretrain_tower`), which trains, prints held-out accuracy and saves the tower::

    vidspec tower-pretrain --train runs/testbed/vision/train.safetensors \
        --test runs/testbed/vision/test.safetensors --out runs/testbed/vision --steps 8000
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn as nn

from vidspec.decoding.models.qwen2_5_vl import patchify_batch
from vidspec.draft_training.testbed.arch import ArchConfig, qwen_vision_config, siglip_vision_config

TOWER_FILE = "tower.safetensors"
TOWER_CONFIG = "tower.json"


class TowerProbe(nn.Module):
    """The SigLIP tower of ``arch`` with three linear attribute read-outs."""

    def __init__(self, arch: ArchConfig, classes: tuple[int, int, int]):
        super().__init__()
        from transformers import SiglipVisionConfig, SiglipVisionModel

        vc = dict(siglip_vision_config(arch))
        vc.pop("model_type")
        self.tower = SiglipVisionModel(SiglipVisionConfig(**vc))
        h = arch.vision_hidden_size
        n_tok = (arch.image_size // arch.patch_size) ** 2
        self.shape = nn.Linear(h, classes[0])
        self.colour = nn.Linear(h, classes[1])
        self.motion = nn.Linear(2 * n_tok * h, classes[2])
        from vidspec.decoding.models.llava_onevision import CLIP_MEAN, CLIP_STD

        self.register_buffer("mean", torch.tensor(CLIP_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(CLIP_STD).view(1, 3, 1, 1), persistent=False)

    def forward(self, first: torch.Tensor, last: torch.Tensor):
        b = first.shape[0]
        x = torch.cat([first, last]).float() / 255.0
        x = (x - self.mean) / self.std  # as the LLaVA-OV adapter normalises frames
        tok = self.tower(pixel_values=x).last_hidden_state
        f, l_ = tok[:b], tok[b:]
        pooled = f.mean(1)
        return self.shape(pooled), self.colour(pooled), self.motion(torch.cat([f, l_], 1).flatten(1))


class QwenTowerProbe(nn.Module):
    """Qwen2.5-VL's vision tower (with its merger) of ``arch`` and three linear attribute read-outs."""

    def __init__(self, arch: ArchConfig, classes: tuple[int, int, int]):
        super().__init__()
        from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLVisionConfig
        from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (
            Qwen2_5_VisionTransformerPretrainedModel,
        )

        config = Qwen2_5_VLVisionConfig(**qwen_vision_config(arch))
        config._attn_implementation = "sdpa"
        self.tower = Qwen2_5_VisionTransformerPretrainedModel(config)
        from vidspec.draft_training.qwen_vision import use_grouped_vision_attention

        use_grouped_vision_attention(self.tower)
        self.patch = arch.patch_size
        units = (arch.image_size // arch.patch_size // 2) ** 2  # merged tokens of one frame pair
        d = arch.hidden_size
        self.shape = nn.Linear(d, classes[0])
        self.colour = nn.Linear(d, classes[1])
        self.motion = nn.Linear(2 * units * d, classes[2])

    def encode(self, first: torch.Tensor, last: torch.Tensor):
        """The tower's output on the scenes as two frame pairs: [first, first] and [last, last] for ``(B, 3, H, W)``
        frames, or the pairs themselves for ``(B, 2, 3, H, W)`` ones. ``pooler_output`` holds the merged tokens,
        ``last_hidden_state`` the states before the merger (in window order)."""
        if first.dim() == 4:
            first, last = torch.stack([first, first], 1), torch.stack([last, last], 1)
        b, _, _, h, w = first.shape
        clip = torch.cat([first, last], dim=1).permute(0, 1, 3, 4, 2)  # two frame pairs, (B, 4, H, W, 3)
        grid = first.new_tensor([[2, h // self.patch, w // self.patch]], dtype=torch.long).expand(b, 3)
        from vidspec.draft_training.qwen_vision import tower_indices

        # the tower's per-video positions and window order, built once per batch shape (not per video, per step)
        pre = {k.removeprefix("video_"): v for k, v in tower_indices(self.tower, grid).items()}
        return self.tower(patchify_batch(clip, self.patch), grid_thw=grid, **pre)

    def forward(self, first: torch.Tensor, last: torch.Tensor):
        """``first``, ``last``: ``(B, 3, H, W) uint8`` frames, as :class:`TowerProbe` takes them, or frame pairs
        ``(B, 2, 3, H, W)``."""
        b = first.shape[0]
        tok = self.encode(first, last).pooler_output
        tok = tok.view(b, 2, -1, tok.shape[-1])
        pooled = tok[:, 0].mean(1)
        return self.shape(pooled), self.colour(pooled), self.motion(tok.flatten(1))


def evaluate(model: nn.Module, test, batch: int = 500) -> dict[str, float]:
    tf, tl, ty = test
    model.eval()
    right = [0.0, 0.0, 0.0]
    with torch.no_grad():
        for s in range(0, tf.shape[0], batch):
            out = model(tf[s:s + batch], tl[s:s + batch])
            for i in range(3):
                right[i] += float((out[i].argmax(-1) == ty[s:s + batch, i]).sum())
    model.train()
    n = tf.shape[0]
    return {"shape": right[0] / n, "colour": right[1] / n, "motion": right[2] / n}


def warm_start_tower(tower: nn.Module, path: str | Path) -> list[str]:
    """Copy into ``tower`` every tensor of a trained tower whose name and shape match, and return the names of
    ``tower``'s tensors left as initialised. ``path`` is a saved tower (a folder with ``tower.safetensors``) or an
    exported target (``model.safetensors``, whose ``visual.`` / ``vision_tower.`` tensors are the tower). A Qwen2.5-VL
    tower pretrained for one language-model width starts another width's this way: all but the merger's last
    projection (``merger.mlp.2``), which depends on the width.

    Raises:
        ConfigError: no tower at ``path``, or one that shares no tensor with ``tower`` (another family or size).
    """
    from safetensors.torch import load_file

    from vidspec.decoding.errors import ConfigError

    p = Path(path)
    f = next((c for c in (p / TOWER_FILE, p / "model.safetensors", p) if c.is_file()), None)
    if f is None:
        raise ConfigError(f"tower init: no {TOWER_FILE} or model.safetensors at {str(path)!r}")
    state = load_file(str(f))
    if f.name != TOWER_FILE:  # an exported target: keep its tower's tensors, without their prefix
        state = {k.split(pre, 1)[1]: v for k, v in state.items() for pre in ("visual.", "vision_tower.") if pre in k}
    own = tower.state_dict()
    fit = {k: v.to(own[k].dtype) for k, v in state.items() if k in own and own[k].shape == v.shape}
    if not fit:
        raise ConfigError(f"tower init {str(path)!r} shares no tensor with this tower (another family or size)")
    tower.load_state_dict(fit, strict=False)
    return sorted(set(own) - set(fit))


def train_tower(arch: ArchConfig, steps: int, lr: float, batch: int, warmup: int, device: str,
                train, test, classes, every: int = 500, label: str = "", log=print,
                init: str | Path | None = None) -> tuple[nn.Module, list[dict]]:
    """Train a :class:`TowerProbe` (a :class:`QwenTowerProbe` for a Qwen2.5-VL ``arch``); returns it and the
    held-out curve (one row per ``every`` steps). ``init``: start from a trained tower (:func:`warm_start_tower`)."""
    torch.manual_seed(0)
    model = (QwenTowerProbe if arch.family == "qwen2.5-vl" else TowerProbe)(arch, classes)
    if init is not None:
        fresh = warm_start_tower(model.tower, init)
        log(f"{label:>24} started from {init}; initialised afresh: {', '.join(fresh) or 'nothing'}")
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)

    def factor(s: int) -> float:
        return min(1.0, (s + 1) / max(1, warmup)) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    first, last, ys = (t.to(device) for t in train)
    test = tuple(t.to(device) for t in test)
    ce = nn.functional.cross_entropy
    curve, t0 = [], time.perf_counter()
    for step in range(1, steps + 1):
        idx = torch.randint(0, first.shape[0], (batch,), device=device)
        out = model(first[idx], last[idx])
        loss = sum(ce(o, ys[idx, i]) for i, o in enumerate(out))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % every == 0 or step == steps:
            acc = evaluate(model, test)
            row = {"step": step, "loss": float(loss.detach()), **acc, "seconds": time.perf_counter() - t0}
            curve.append(row)
            log(f"{label:>24} step {step:6d} loss {row['loss']:.3f} shape {acc['shape']:.3f} "
                f"colour {acc['colour']:.3f} motion {acc['motion']:.3f} ({row['seconds']:.0f} s)")
    return model, curve


def save_tower(model: nn.Module, arch: ArchConfig, out: str | Path, metrics: dict | None = None) -> Path:
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.tower.state_dict().items()}
    save_file(state, str(out / TOWER_FILE))
    (out / TOWER_CONFIG).write_text(json.dumps({"arch": asdict(arch), "metrics": metrics or {}}, indent=1))
    return out


def load_tower_into(vision_tower: nn.Module, path: str | Path, arch: dict | None = None) -> None:
    """Copy a saved tower into a model's vision tower (LLaVA-OV's ``vision_tower``, Qwen2.5-VL's ``visual``;
    shapes must match exactly).

    Raises:
        ConfigError: no tower at ``path``, or a tower of other sizes.
    """
    from safetensors.torch import load_file

    from vidspec.decoding.errors import ConfigError

    p = Path(path)
    f = p / TOWER_FILE if p.is_dir() else p
    if not f.is_file():
        raise ConfigError(f"vision_init: no {TOWER_FILE} at {str(path)!r} (run vidspec.draft_training.testbed.vision_pretrain)")
    state = load_file(str(f))
    own = vision_tower.state_dict()
    missing = sorted(set(own) - set(state))
    bad = [k for k in state if k in own and own[k].shape != state[k].shape]
    if missing or bad or set(state) - set(own):
        saved = json.loads((f.parent / TOWER_CONFIG).read_text()).get("arch", {}) if (f.parent / TOWER_CONFIG).is_file() else {}
        want = {k: (arch or {}).get(k) for k in ("family", "vision_hidden_size", "vision_layers", "vision_heads", "image_size",
                                                     "patch_size", "hidden_size")}
        have = {k: saved.get(k) for k in want}
        raise ConfigError(f"vision_init {str(path)!r} does not fit this model's vision tower (tower {have}, model {want})")
    vision_tower.load_state_dict(state, strict=True)


def extract_tower(model: str | Path, out: str | Path, layers: int | None = None) -> Path:
    """Write the vision tower of an exported model (a release folder) as a saved tower that ``vision_init`` loads.

    A draft VLM of the target's family can then start from the target's tower instead of from scratch, as real
    same-family pairs share a pretrained encoder. ``layers`` keeps only the first blocks (a shallower tower for a
    smaller draft); the patch embedding and the merger (Qwen2.5-VL) or post-norm (SigLIP) are kept whole, so the
    draft's ``vision_hidden_size``, ``patch_size`` and (Qwen2.5-VL) language-model width must be the model's.

    Args:
        model: folder with ``model.safetensors`` (and ``manifest.json``, whose ``arch`` goes into ``tower.json``).
        out: folder for ``tower.safetensors`` and ``tower.json``.
        layers: blocks to keep (default: all).

    Returns:
        ``out``.

    Raises:
        ConfigError: no weights at ``model``, no vision tower in them, or ``layers`` outside 1..the tower's depth.
    """
    import re

    from safetensors.torch import load_file, save_file

    from vidspec.decoding.errors import ConfigError

    src = Path(model) / "model.safetensors"
    if not src.is_file():
        raise ConfigError(f"extract_tower: no model.safetensors in {str(model)!r}")
    state = {k.split(pre, 1)[1]: v for k, v in load_file(str(src)).items()
             for pre in ("visual.", "vision_tower.") if pre in k}
    if not state:
        raise ConfigError(f"extract_tower: {str(model)!r} has no vision tower (no visual. or vision_tower. tensors)")
    block = re.compile(r"(?:^|\.)(?:blocks|layers)\.(\d+)\.")
    depth = 1 + max((int(m.group(1)) for k in state if (m := block.search(k))), default=-1)
    keep = depth if layers is None else layers
    if not 1 <= keep <= depth:
        raise ConfigError(f"extract_tower: layers must be in 1..{depth} (the tower's depth), got {layers}")
    kept = {k: v.float().contiguous() for k, v in state.items() if not (m := block.search(k)) or int(m.group(1)) < keep}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    save_file(kept, str(out / TOWER_FILE))
    manifest = Path(model) / "manifest.json"
    arch = dict(json.loads(manifest.read_text()).get("arch") or {}) if manifest.is_file() else {}
    arch["vision_layers"] = keep
    (out / TOWER_CONFIG).write_text(json.dumps({"arch": arch, "metrics": {}, "extracted_from": Path(model).name,
                                                "layers_kept": keep, "layers_of_source": depth}, indent=1))
    return out


def load_scenes(path: str | Path) -> tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], tuple[int, int, int]]:
    """A scene file: ``first`` and ``last`` frames, ``(N, 3, H, W)`` uint8 (``(N, 2, 3, H, W)``: frame pairs, for a
    Qwen2.5-VL tower), ``labels`` ``(N, 3)`` int64 (shape, colour, motion class), and in its metadata ``classes``
    (the three class counts, comma-separated). Returns ``((first, last, labels), classes)``.

    Raises:
        ConfigError: no file at ``path``, or one without those tensors.
    """
    from safetensors import safe_open

    from vidspec.decoding.errors import ConfigError

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"no scene file at {str(path)!r}")
    with safe_open(str(p), "pt") as f:
        meta = f.metadata() or {}
        if not {"first", "last", "labels"} <= set(f.keys()) or "classes" not in meta:
            raise ConfigError(f"{p} is not a scene file (needs first, last, labels and the classes metadata)")
        tensors = tuple(f.get_tensor(k) for k in ("first", "last", "labels"))
    classes = tuple(int(c) for c in meta["classes"].split(","))
    return tensors, classes  # type: ignore[return-value]


def pretrain_tower(train: str = "", test: str = "", out: str = "", family: str = "llava-ov",
                   vision_hidden_size: int = 128, vision_layers: int = 4, vision_heads: int = 4, patch_size: int = 8,
                   lm_hidden: int = 192, vision_init_std: float | None = None, steps: int = 8000, lr: float = 5e-4,
                   batch: int = 128, warmup: int = 100, every: int = 1000, device: str = "auto",
                   init: str | None = None, extract_from: str | None = None, keep_layers: int | None = None) -> int:
    """Pretrain a testbed vision tower on a scene file and save it (``vidspec tower-pretrain``); or, with
    ``extract_from``, save an exported model's tower without training (:func:`extract_tower`)::

        vidspec tower-pretrain --extract-from data/releases/qwen2.5-vl/synthvid-target --keep-layers 1 --out TOWER

    Args:
        train: scene file to train on (:func:`load_scenes`).
        test: held-out scene file (another seed) for the accuracy printed every ``every`` steps.
        out: folder for ``tower.safetensors`` and ``tower.json`` (final held-out accuracy included).
        family: "llava-ov" (SigLIP) or "qwen2.5-vl" (its tower and merger; the scene file holds frame pairs).
        vision_hidden_size: the tower's width.
        vision_layers: its layers.
        vision_heads: its attention heads.
        patch_size: its patch size in pixels (the image size is the scenes').
        lm_hidden: Qwen2.5-VL: the language model's width its merger projects into (the target's
            ``arch.hidden_size``).
        vision_init_std: initial weight std of a Qwen2.5-VL tower (default: transformers').
        steps: optimizer steps.
        lr: peak learning rate (linear warm-up, cosine decay).
        batch: scenes per step.
        warmup: warm-up steps.
        every: held-out evaluation period in steps.
        device: "auto", "cpu", "cuda", ...
        init: start from a trained tower or an exported target (:func:`warm_start_tower`).
        extract_from: an exported model (release folder) whose tower is written to ``out``; nothing is trained.
        keep_layers: with ``extract_from``: keep only the tower's first blocks (default: all).
    """
    from vidspec.decoding.errors import ConfigError

    if extract_from:
        if not out:
            raise ConfigError("--out is required")
        extract_tower(extract_from, out, keep_layers)
        print(f"tower of {extract_from} saved to {out}", flush=True)
        return 0
    if not train or not test or not out:
        raise ConfigError("--train, --test and --out are required")
    train_set, classes = load_scenes(train)
    test_set, _ = load_scenes(test)
    extra = {"hidden_size": lm_hidden, "num_heads": 4} if family == "qwen2.5-vl" else {}
    arch = ArchConfig(family=family, vision_hidden_size=vision_hidden_size, vision_layers=vision_layers,
                      vision_heads=vision_heads, image_size=int(train_set[0].shape[-1]), patch_size=patch_size,
                      vision_init_std=vision_init_std, **extra)
    dev = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    model, curve = train_tower(arch, steps, lr, batch, warmup, dev, train_set, test_set, classes, every,
                               label=f"{family} h{vision_hidden_size}", log=lambda m: print(m, flush=True), init=init)
    save_tower(model, arch, out, {"final": curve[-1], "steps": steps, "lr": lr, "batch": batch,
                                  "scenes": int(train_set[0].shape[0])})
    print(f"tower saved to {out}", flush=True)
    return 0


def tower_pretrain_main(argv: list[str]) -> int:
    """Entry point of ``vidspec tower-pretrain`` (see :func:`pretrain_tower`)."""
    from vidspec.decoding.cli import run_function

    return run_function(pretrain_tower, "vidspec tower-pretrain", argv)
