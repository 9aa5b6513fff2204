"""A precomputed target-feature cache, for targets too large to run beside training.

Run the target once over the training data and store, per example, its second-to-last-layer
states, the IVSB layer's states, the final normed states (logits are recomputed from them with
the LM head, which is far smaller than storing ``(L, V)`` logits) and its position ids. Training
with ``model.init_args.feature_cache: DIR`` then skips the target's forward pass (the
embedding table and LM head are still loaded).

Layout: ``DIR/features.json`` (target id and fingerprint, IVSB layer) and one
``DIR/<key>.safetensors`` per example, where ``key`` hashes the example's token ids and pixels,
so the cache is independent of batch composition and order.

Resumable and crash-safe: each file is written to ``.<name>.<8 hex>`` beside it, synced and
renamed, so a file under its final name is whole even after a kill or a power loss. While a run
is under way the target's identity is in ``features.partial.json`` and ``features.json`` is
absent; ``features.json`` is written last and marks a finished cache (training refuses a folder
without it). A rerun removes leftover temporary files of this command, checks the identity,
skips the examples whose file is whole (rewriting any that is not a readable safetensors file of
the expected shapes) and writes ``features.json`` again.

Usage::

    vidspec sparrow-features --target tiny-qwen2.5-vl --data data/cache/distilled --out data/cache/feats
    vidspec train fit --config configs/train/sparrow-qwen2.5-vl-7b.yaml \\
        --model.init_args.feature_cache data/cache/feats

(The data loader still decodes the videos to build the batches' token ids and keys.)

Two layouts (``--keep``): ``all`` stores the three states at every position, 3 x d x 2 bytes a token (~0.28 GB for
a 13k-token example of a 3584-wide target); ``read`` stores only what training reads: the penultimate states at
text positions and at the position before each (the first text after the video reads the last visual state), the
final states at text positions, the IVSB layer's states at visual positions (none when ``ivsb`` is off), with their
indices. With IVSB the visual states dominate (d x 2 bytes a visual token, a third of ``all``); without it an
example costs only its text. The command states the bytes a token of each kind costs before it starts.

This module is the cache alone (it reads a module only through the ``precompute_features`` argument);
the ``vidspec sparrow-features`` command that builds the Sparrow module and the data lives in
:mod:`vidspec.draft_training.sparrow.precompute`, so the training module can import the cache without a cycle.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

import torch

from vidspec.decoding.drafters.sparrow import target_fingerprint
from vidspec.decoding.errors import ConfigError
from vidspec.decoding.fsutil import atomic_path, remove_temps

log = logging.getLogger(__name__)

MANIFEST = "features.json"
# The target's identity while a run is under way (features.json, the finished marker, is absent).
PARTIAL = "features.partial.json"
_ENTRY = ("penult", "mid", "last", "positions")
# the "read" layout: each state with the sequence positions it is stored at
_READ_ENTRY = ("penult", "penult_idx", "mid", "mid_idx", "last", "last_idx", "positions")
# Temporary files of this command, and only those: atomic_path's ".<name>.<8 hex>" for an entry or
# the two JSON files, and ".<key>.<8 hex>.tmp" of the writer before it (left forever by a kill).
_TEMP = re.compile(r"\.(?:[0-9a-f]{40}\.safetensors|features(?:\.partial)?\.json)\.[0-9a-f]{8}"
                   r"|\.[0-9a-f]{40}\.[0-9a-f]{8}\.tmp")


def sample_keys(batch: dict[str, Any]) -> list[str]:
    """One key per example of a batch: sha1 of its unpadded token ids and its own pixels."""
    ids, mask = batch["input_ids"], batch["attention_mask"]
    pix = batch.get("pixel_values_videos")
    chunks: list[torch.Tensor | None]
    if pix is None:
        chunks = [None] * ids.shape[0]
    elif "video_grid_thw" in batch:  # Qwen2.5-VL: patches of all videos concatenated
        sizes = batch["video_grid_thw"].prod(-1).tolist()
        chunks = list(torch.split(pix, sizes))
    else:
        chunks = list(pix)
    keys = []
    for b in range(ids.shape[0]):
        h = hashlib.sha1()
        n = int(mask[b].sum())
        h.update(ids[b, :n].cpu().numpy().astype("int64").tobytes())
        if chunks[b] is not None:
            h.update(chunks[b].detach().float().cpu().numpy().tobytes())
        keys.append(h.hexdigest())
    return keys


def _write_json(path: Path, obj: dict) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")


def _check_identity(path: Path, man: dict) -> None:
    """Refuse a cache folder whose ``path`` (features.json or the partial file) names another target."""
    if not path.is_file():
        return
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ConfigError(f"{path} is unreadable, so the target of the features in {path.parent} is unknown; "
                          "choose another folder") from None
    if old.get("target_fingerprint") != man["target_fingerprint"] or old.get("ivsb_layer") != man["ivsb_layer"]:
        raise ConfigError(f"{path.parent} holds features of another target or IVSB layer; choose another folder")


def _is_whole(path: Path, n: int) -> bool:
    """Whether ``path`` is a finished entry of ``n`` tokens: a readable safetensors file, expected shapes."""
    from safetensors import SafetensorError, safe_open

    if not path.is_file():
        return False
    try:
        with safe_open(str(path), framework="pt") as f:
            shapes = {k: list(f.get_slice(k).get_shape()) for k in f.keys()}
    except (SafetensorError, OSError):
        shapes = {}
    if set(shapes) == set(_READ_ENTRY):
        ok = (len(shapes["positions"]) == 2 and shapes["positions"][1] == n
              and all(shapes[k][0] == shapes[f"{k}_idx"][0] for k in ("penult", "mid", "last")))
    else:
        ok = (set(shapes) == set(_ENTRY) and len(shapes["positions"]) == 2 and shapes["positions"][1] == n
              and all(len(shapes[k]) == 2 and shapes[k][0] == n and shapes[k][1] == shapes["penult"][1]
                      for k in ("penult", "mid", "last")))
    if not ok:
        log.warning("%s is not a whole feature file of %d tokens; computing it again", path, n)
    return ok


@torch.no_grad()
def read_positions(ids: torch.Tensor, video_token_id: int, ivsb: bool) -> dict[str, torch.Tensor]:
    """For one unpadded example, the positions whose states training reads (see the module docstring)."""
    is_vis = ids == video_token_id
    txt = torch.nonzero(~is_vis).flatten()
    prev = (txt - 1).clamp_min(0)
    return {"penult_idx": torch.unique(torch.cat([txt, prev])), "last_idx": txt,
            "mid_idx": torch.nonzero(is_vis).flatten() if ivsb else txt[:0]}


def bytes_per_token(hidden: int, keep: str, ivsb: bool) -> dict[str, int]:
    """Bytes the cache stores per text and per visual token (bf16 states; positions and indices not counted)."""
    if keep == "all":
        return {"text": 3 * hidden * 2, "visual": 3 * hidden * 2}
    return {"text": 2 * hidden * 2, "visual": hidden * 2 if ivsb else 0}


class _TargetStays:
    """While active, ``module.target_features`` runs the target where it is instead of first moving it to the
    draft's device (what a training step wants): a cache build needs no draft, and a module never placed by a
    Trainer keeps its draft on the CPU while its target was loaded on the GPU, so following the draft would run a
    7B forward on the CPU (minutes an example)."""

    def __init__(self, module):
        self.module = module

    def __enter__(self):
        object.__setattr__(self.module, "_ensure_target_device", lambda: None)

    def __exit__(self, *exc):
        self.module.__dict__.pop("_ensure_target_device", None)


def precompute_features(module, batches, out_dir: str | Path, progress: bool = True, keep: str = "all",
                        device: str | torch.device | None = None) -> int:
    """Write the target features of every example in ``batches`` to ``out_dir``.

    Args:
        module: a :class:`~vidspec.draft_training.sparrow.SparrowDistillModule` (its target and
            IVSB layer are used).
        batches: an iterable of batches (e.g. a ``VideoTextDataModule``'s train loader).
        out_dir: the cache folder.
        progress: show a progress bar.
        keep: "all" (every position) or "read" (only what training reads; see the module docstring).
        device: where the target runs (it is moved there first); ``None``: where it already is, wherever the
            module's draft sits.

    Returns:
        The number of examples written (existing ones are skipped).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    remove_temps(out, _TEMP)
    if keep not in ("all", "read"):
        raise ConfigError(f"keep {keep!r}: expected 'all' or 'read'")
    man = {"target_id": module.hparams["target"], "target_fingerprint": target_fingerprint(module.target),
           "ivsb_layer": module.ivsb_layer}
    ivsb = module.draft_options.ivsb
    d = module.target.model.config.get_text_config().hidden_size
    per = bytes_per_token(d, keep, ivsb)
    log.warning("feature cache (--keep %s): %d bytes a text token, %d a visual token; a 13,000-token example with "
                "12,000 visual tokens takes %.0f MB", keep, per["text"], per["visual"],
                (1000 * per["text"] + 12000 * per["visual"]) / 1e6)
    _check_identity(out / MANIFEST, man)
    _check_identity(out / PARTIAL, man)
    # The identity goes to the partial file before the finished marker goes, so the folder always
    # names its target; the marker is absent until every example of this run is on disk.
    _write_json(out / PARTIAL, man)
    (out / MANIFEST).unlink(missing_ok=True)
    if device is not None and module.target.device != torch.device(device):
        module.target.model.to(device)
    log.info("feature cache: the target runs on %s", module.target.device)
    with _TargetStays(module):
        written = _write_entries(module, batches, out, keep, ivsb, progress)
    _write_json(out / MANIFEST, man)
    (out / PARTIAL).unlink()
    return written


def _write_entries(module, batches, out: Path, keep: str, ivsb: bool, progress: bool) -> int:
    """The loop of :func:`precompute_features`: one safetensors file per example not yet whole on disk."""
    from safetensors.torch import save_file
    from tqdm.auto import tqdm

    written = 0
    for batch in tqdm(batches, desc="features", disable=not progress):
        keys = sample_keys(batch)
        lengths = batch["attention_mask"].sum(-1).tolist()
        todo = [b for b, k in enumerate(keys) if not _is_whole(out / f"{k}.safetensors", int(lengths[b]))]
        if not todo:
            continue
        dev = module.target.device
        batch = {k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}
        feats = module.target_features(batch)
        for b in todo:
            n = int(batch["attention_mask"][b].sum())
            if keep == "read":
                idx = read_positions(batch["input_ids"][b, :n], module.target.video_token_id, ivsb)
                tensors = {"positions": feats["positions"][:, b, :n].cpu().contiguous()}
                for k in ("penult", "mid", "last"):
                    tensors[k] = feats[k][b, idx[f"{k}_idx"]].to(torch.bfloat16).cpu().contiguous()
                    tensors[f"{k}_idx"] = idx[f"{k}_idx"].to(torch.int32).cpu().contiguous()
            else:
                tensors = {
                    "penult": feats["penult"][b, :n].to(torch.bfloat16).cpu().contiguous(),
                    "mid": feats["mid"][b, :n].to(torch.bfloat16).cpu().contiguous(),
                    "last": feats["last"][b, :n].to(torch.bfloat16).cpu().contiguous(),
                    "positions": feats["positions"][:, b, :n].cpu().contiguous(),
                }
            with atomic_path(out / f"{keys[b]}.safetensors") as tmp:
                save_file(tensors, str(tmp))
            written += 1
    return written


class FeatureCache:
    """Reads :func:`precompute_features` output for batches (see the module docstring).

    Raises:
        ConfigError: the cache was made for another target, or lacks an example.
    """

    def __init__(self, path: str | Path, target):
        self.path = Path(path)
        if not (self.path / MANIFEST).is_file():
            if (self.path / PARTIAL).is_file():
                raise ConfigError(f"{path} is an unfinished Sparrow feature cache (no {MANIFEST}); rerun "
                                  "vidspec sparrow-features with the same options to finish it")
            raise ConfigError(f"{path} is not a Sparrow feature cache (no {MANIFEST})")
        man = json.loads((self.path / MANIFEST).read_text())
        if man.get("target_fingerprint") != target_fingerprint(target):
            raise ConfigError(f"feature cache {path} was made with target {man.get('target_id')!r}, not this one")
        self.manifest = man

    def lookup(self, batch: dict[str, Any], device) -> dict[str, torch.Tensor]:
        """``penult``/``mid``/``last`` ``(B, L, d)`` (zero-padded) and ``positions`` ``(A, B, L)``."""
        from safetensors.torch import load_file

        keys = sample_keys(batch)
        B, L = batch["input_ids"].shape
        rows = []
        for k in keys:
            f = self.path / f"{k}.safetensors"
            if not f.is_file():
                raise ConfigError(f"feature cache {self.path} has no entry for an example (key {k}); rerun "
                                  "vidspec sparrow-features on this data")
            rows.append(load_file(str(f)))
        d = rows[0]["penult"].shape[-1]
        A = rows[0]["positions"].shape[0]
        out = {name: torch.zeros(B, L, d, dtype=torch.float32) for name in ("penult", "mid", "last")}
        pos = torch.zeros(A, B, L, dtype=torch.long)
        for b, r in enumerate(rows):
            n = r["positions"].shape[1]
            for name in ("penult", "mid", "last"):
                if f"{name}_idx" in r:  # the "read" layout: states at the stored positions, zeros elsewhere
                    out[name][b, r[f"{name}_idx"].long()] = r[name].float()
                else:
                    out[name][b, :n] = r[name].float()
            pos[:, b, :n] = r["positions"]
        return {**{k: v.to(device) for k, v in out.items()}, "positions": pos.to(device)}
