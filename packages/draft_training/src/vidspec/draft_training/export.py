"""Training checkpoint -> release folder that decoding and evaluation load (``vidspec export``).

A release is a Hugging Face-format folder::

    OUT/config.json, model.safetensors, generation_config.json   save_pretrained (safetensors)
    OUT/tokenizer.json, tokenizer_config.json, ...                the training tokenizer
    OUT/vidspec.json      {"adapter_options": {...}, "max_frames": N}: read by load_target
    OUT/manifest.json     git SHA, module, training config, final metrics, sha256 fingerprint
    OUT/README.md         model card (huggingface_hub ModelCard: YAML metadata, use, training facts)

A Sparrow draft's release is a ``SparrowDraftModel.save_pretrained`` folder instead (see
docs/releases.md). Checkpoints are read with ``torch.load(weights_only=True)``: tensors and the plain
types Lightning stores, nothing that runs code; a checkpoint holding other objects needs
``trust_checkpoint``. Manifests and cards name no path of the exporting machine (see
:func:`vidspec.draft_training.cards.portable`).

Which files a module writes is up to an *exporter* registered for its class; the driver
(:func:`export_checkpoint`) loads the checkpoint, calls the exporter, and writes the manifest,
fingerprint and card for every kind of module. Another module type (e.g. a Sparrow draft)
registers its own::

    from vidspec.draft_training.export import ExportContext, register_exporter

    @register_exporter(SparrowModule)
    def export_sparrow(module, out: Path, ctx: ExportContext) -> dict:
        ...write weights (safetensors) and config files into out...
        return {"kind": "sparrow-draft", "target": ..., "card": "markdown lines for the card"}

Lookup follows the module class's MRO, so subclasses inherit their parent's exporter.
"""

from __future__ import annotations

import datetime
import importlib
import json
import os
import platform
import re
import shutil
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from vidspec.decoding.drafters.sparrow import RELEASE_DTYPES
from vidspec.decoding.errors import ConfigError
from vidspec.decoding.fsutil import replace_dir
from vidspec.decoding.integrity import fingerprint as integrity_fingerprint
from vidspec.decoding.integrity import weight_files
from vidspec.draft_training.cards import portable

MANIFEST_VERSION = 1


@dataclass
class ExportContext:
    """What an exporter may use besides the module.

    Attributes:
        ckpt_path: the training checkpoint.
        run_config: the resolved ``vidspec train`` config (dict) or None.
        metrics: final logged metrics of the run (``train/loss``, ``val/loss``, ``global_step``...).
        extra: anything the driver adds later.
        dtype: the dtype the weights are saved in.
    """

    ckpt_path: str
    run_config: dict | None
    metrics: dict[str, float]
    extra: dict[str, Any] = field(default_factory=dict)
    #: "float32", "bfloat16" or "float16"; an exporter that cannot write a narrower one raises ConfigError
    dtype: str = "float32"


#: An exporter writes a module's model files into a folder and returns manifest fields
#: (``kind`` and anything else worth recording; an optional ``card`` string is added to README.md).
Exporter = Callable[[Any, Path, ExportContext], dict]

EXPORTERS: dict[type, Exporter] = {}


def register_exporter(module_cls: type) -> Callable[[Exporter], Exporter]:
    """Decorator: use the decorated function to export modules of ``module_cls`` (and subclasses)."""

    def deco(fn: Exporter) -> Exporter:
        EXPORTERS[module_cls] = fn
        return fn

    return deco


def exporter_for(module) -> Exporter:
    """The exporter registered for ``module``'s class or its nearest base class.

    A module may instead define ``export(out_dir, ctx) -> dict`` itself.

    Raises:
        ConfigError: nothing is registered for the class.
    """
    for cls in type(module).__mro__:
        if cls in EXPORTERS:
            return EXPORTERS[cls]
    if callable(getattr(module, "export", None)):
        return lambda m, out, ctx: m.export(out, ctx)
    raise ConfigError(f"no exporter registered for {type(module).__qualname__} (see vidspec.draft_training.export)")


# ---- the SFT exporter (registered by vidspec.draft_training.sft) ----------------------------------
def write_release_options(out: Path, adapter_options: dict, max_frames: int) -> None:
    """A Video-LLM release's ``vidspec.json``: the adapter options and frame budget its loader uses."""
    (Path(out) / "vidspec.json").write_text(json.dumps(
        {"adapter_options": dict(adapter_options), "max_frames": int(max_frames)}, indent=2) + "\n")


def export_vlm(module, out: Path, ctx: ExportContext) -> dict:
    """Exporter of :class:`~vidspec.draft_training.sft.VLMSFTModule`: a plain HF Video-LLM folder."""
    model = module.model
    model.config.name_or_path = str(out)
    if ctx.dtype != "float32":  # a smaller release; loaders upcast it (load_target(dtype="float32") on CPU)
        model.to(getattr(torch, ctx.dtype))
    model.save_pretrained(str(out), safe_serialization=True)
    module.tokenizer.save_pretrained(str(out))
    write_release_options(out, module.adapter_options, module.max_frames)
    text = model.config.get_text_config()
    n = sum(p.numel() for p in model.parameters())
    arch = module.hparams.get("arch") or _init_arch(module.hparams.get("init_from"))
    return {
        "kind": "video-llm",
        "family": module.family,
        "parameters": n,
        "layers": text.num_hidden_layers,
        "hidden_size": text.hidden_size,
        "arch": arch,
        "init_from": module.hparams.get("init_from"),
        "card": (
            f"A {module.family} Video-LLM ({text.num_hidden_layers} layers, hidden {text.hidden_size}, "
            f"{n / 1e6:.2f}M parameters) trained with supervised fine-tuning on captions and questions "
            f"(loss on answer tokens only), {module.max_frames} frames per video."
        ),
    }


# ---- the driver ----------------------------------------------------------------------------------
def git_sha(path: str | Path | None = None) -> str | None:
    """Commit of the repository holding ``path`` (this file by default), "+dirty" if modified."""
    where = str(Path(path or __file__).resolve().parent)
    try:
        sha = subprocess.run(["git", "-C", where, "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", where, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        # No git checkout (e.g. a GPU machine that received the tree without .git): the caller
        # may pass the commit in the environment.
        return os.environ.get("VIDSPEC_GIT_SHA") or None
    return sha + ("+dirty" if dirty else "")


def final_metrics(info: dict) -> dict[str, float]:
    """The run's metrics at its checkpoint: the trainer's metrics when the checkpoint was written, updated with what
    the run's ``metrics.jsonl`` recorded at the same step.

    The last checkpoint is written after the run's last training batch and before the validation that runs at that
    step, so on its own it holds the previous validation's figures (a card once listed ``val/mcq_acc/motion`` 0.52
    from step 2200 where step 2400's validation logged 0.72). A missing metrics file (a run written before
    ``metrics.jsonl`` existed, or a moved run) leaves the checkpoint's metrics as they are.
    """
    from vidspec.draft_training.callbacks import read_metrics

    metrics = dict(info.get("metrics") or {})
    step = metrics.get("global_step")
    if step is None or not info.get("metrics_file"):
        return metrics
    try:
        records = read_metrics(info["metrics_file"])
    except (OSError, ValueError):  # unreadable or cut short: the checkpoint's own metrics stand
        return metrics
    for record in records:  # a resumed run appends: the last record of the step wins
        if record.get("step") == step:
            metrics.update({k: float(v) for k, v in record.items()
                            if k not in ("step", "epoch", "time") and isinstance(v, (int, float))})
    return metrics


def fingerprint(folder: Path) -> str:
    """sha256 over the weight files (``*.safetensors``, sorted by name): names and bytes, as loading checks it
    (:func:`vidspec.decoding.integrity.fingerprint`)."""
    if not weight_files(folder):
        raise ConfigError(f"the exporter wrote no .safetensors file into {folder}")
    return integrity_fingerprint(folder)


def _plain_globals() -> list:
    """Classes beyond tensors and builtins that Lightning writes into a checkpoint and that only hold data."""
    import pathlib

    # Lightning itself writes dicts, lists, numbers, strings and tensors (its hyperparameters are saved as a
    # plain dict); paths come in through callbacks' and loggers' state.
    return [pathlib.PosixPath, pathlib.PurePosixPath, pathlib.WindowsPath, pathlib.PureWindowsPath]


def read_checkpoint(path: str | Path, map_location: str = "cpu", trust_checkpoint: bool = False) -> dict:
    """``torch.load`` of a training checkpoint without running code from it.

    Loads with ``weights_only=True`` (tensors, containers, numbers, strings and the classes of
    :func:`_plain_globals`). A pickle naming any other class could run arbitrary code while it is read,
    so it is refused unless ``trust_checkpoint`` (then loaded as a full pickle).

    Raises:
        ConfigError: the file is unreadable, or holds other objects and ``trust_checkpoint`` is off.
    """
    import pickle

    from vidspec.decoding.cli import one_line

    if trust_checkpoint:
        try:
            return torch.load(str(path), map_location=map_location, weights_only=False)
        except Exception as e:  # corrupt or not a torch file
            raise ConfigError(f"cannot read checkpoint {path}: {type(e).__name__}: {one_line(e, 'unreadable')}") from None
    try:
        with torch.serialization.safe_globals(_plain_globals()):
            return torch.load(str(path), map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        found = re.search(r"(Unsupported global: GLOBAL [\w.]+|[\w.<>' ]+ was not an allowed global|Can only \w+ for "
                          r"[^;]*)", str(e))
        if found is None:  # not a pickle of objects at all (a text file, a truncated file)
            raise ConfigError(f"cannot read checkpoint {path}: {type(e).__name__}: "
                              f"{one_line(e, 'unreadable')[:200]}") from None
        raise ConfigError(f"{path} holds objects other than tensors and plain types ({found.group(1).strip()}); "
                          f"reading them would run code from the file. If you trust where it came from, pass "
                          f"--trust-checkpoint") from None
    except Exception as e:  # corrupt or not a torch file
        raise ConfigError(f"cannot read checkpoint {path}: {type(e).__name__}: {one_line(e, 'unreadable')}") from None


def load_module(ckpt_path: str | Path, map_location: str = "cpu", trust_checkpoint: bool = False):
    """Rebuild the LightningModule a ``vidspec train`` checkpoint came from (class from the checkpoint).

    The file is read by :func:`read_checkpoint` (no code from it runs unless ``trust_checkpoint``).

    Raises:
        ConfigError: missing or foreign checkpoint, a module class that cannot be imported (e.g. its
            package is not installed), weights/hyperparameters that do not fit that class, or weights that hold
            NaN or infinite values (a diverged run).
    """
    from vidspec.decoding.cli import one_line

    path = Path(ckpt_path)
    if not path.is_file():
        raise ConfigError(f"checkpoint not found: {path}")
    ckpt = read_checkpoint(path, map_location, trust_checkpoint)
    info = ckpt.get("vidspec") if isinstance(ckpt, dict) else None
    if not isinstance(info, dict) or "module" not in info:
        raise ConfigError(f"{path} is not a vidspec training checkpoint (no 'vidspec' entry)")
    target = info["module"]
    mod_name, _, cls_name = str(target).rpartition(".")
    if not mod_name or not cls_name:
        raise ConfigError(f"{path}: its module class {target!r} is not a dotted class path")
    try:
        cls = getattr(importlib.import_module(mod_name), cls_name)
    except ImportError as e:  # ModuleNotFoundError included; also a failing import inside that module
        raise ConfigError(f"{path}: cannot import its module class {target} ({type(e).__name__}: "
                          f"{one_line(e, 'import failed')}); install the package that defines it") from None
    except AttributeError:
        raise ConfigError(f"{path}: its module class {target} does not exist ({mod_name} has no {cls_name!r}; "
                          f"renamed or removed since the checkpoint was written?)") from None
    if not isinstance(cls, type):
        raise ConfigError(f"{path}: its module class {target} is not a class")
    if "state_dict" not in ckpt:
        raise ConfigError(f"{path} is not a vidspec training checkpoint (no 'state_dict')")
    bad = [k for k, v in ckpt["state_dict"].items()
           if isinstance(v, torch.Tensor) and v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:  # a diverged run: a release of NaN weights would decode garbage without an error
        raise ConfigError(f"{path}: {len(bad)} of its weight tensors hold NaN or infinite values ({bad[0]}, ...): the "
                          f"run diverged before this checkpoint; export an earlier one, or retrain")
    # LightningCLI adds private keys (``_class_path``, ``_instantiator``) to the hyperparameters.
    hparams = {k: v for k, v in (ckpt.get("hyper_parameters") or {}).items() if not k.startswith("_")}
    try:
        module = cls(**hparams)
    except TypeError as e:  # hyperparameters the class (no longer) takes
        raise ConfigError(f"{path}: cannot rebuild {target} from the checkpoint's hyperparameters "
                          f"({one_line(e, 'bad arguments')})") from None
    try:
        module.load_state_dict(ckpt["state_dict"])
    except RuntimeError as e:  # missing/unexpected keys, shape mismatches
        raise ConfigError(f"{path}: its weights do not fit {target} ({one_line(e, 'state_dict mismatch')})") from None
    module.eval()
    module.vidspec_run_config = info.get("run_config")
    return module, ckpt


def _json_field(folder: str | None, name: str, key: str):
    """``key`` of the JSON file ``folder/name``, or None: no folder, no such file here, not a JSON object."""
    f = Path(folder) / name if folder else None
    try:
        return json.loads(f.read_text()).get(key) if f is not None and f.is_file() else None
    except (OSError, json.JSONDecodeError, AttributeError):
        return None


def _init_arch(init_from: str | None) -> dict | None:
    """The architecture a continued model (``init_from``, built from that folder rather than from ``arch``) has:
    the one its starting release's manifest records, or None where there is none to read."""
    return _json_field(init_from, "manifest.json", "arch")


def _card(manifest: dict, extra: str | None, repo: str | None = None, license: str | None = None) -> str:
    """The release's model card (``README.md``) as text (see :func:`vidspec.draft_training.cards.release_card`)."""
    from vidspec.draft_training.cards import release_card

    return str(release_card(manifest, extra, repo=repo, license=license))


def _data_manifest(data_path: str | None) -> dict | None:
    """A summary of the training data's own manifest (``synthvid.json``), or None where it cannot be read."""
    f = Path(data_path) / "synthvid.json" if data_path else None
    try:
        raw = json.loads(f.read_text()) if f is not None and f.is_file() else None
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(raw, dict):
        return None
    keep = ("format", "format_version", "world_version", "config", "splits", "rows", "split_rule")
    return {"name": Path(data_path).name, **{k: raw[k] for k in keep if k in raw}}


def _world_version(data_path: str | None) -> int | None:
    """The SynthVid world version of the training data (its manifest's ``world_version``), or None: another
    dataset, a set made before versions were recorded (world version 1), or a path not on this machine."""
    v = _json_field(data_path, "synthvid.json", "world_version")
    return int(v) if isinstance(v, int) else None


#: weight dtypes a release can be saved in
EXPORT_DTYPES = ("float32", "bfloat16", "float16")


def export_checkpoint(ckpt_path: str | Path, out_dir: str | Path, overwrite: bool = False,
                      dtype: str = "float32", trust_checkpoint: bool = False, license: str | None = None) -> Path:
    """Export a training checkpoint into a release folder (see the module docstring).

    The folder is written beside ``out_dir`` and renamed at the end, so a failed export leaves no
    folder that looks like a release. ``dtype`` narrows the saved weights (a bfloat16 Video-LLM release
    is half the size; recorded in the manifest as ``weights_dtype``; a Sparrow draft takes float32 or
    bfloat16). ``trust_checkpoint`` allows a checkpoint that holds more than tensors and plain types
    (see :func:`read_checkpoint`). ``license`` goes into the card's metadata.

    Raises:
        ConfigError: bad or untrusted checkpoint, unregistered module type, unknown ``dtype`` (or one the module's
            exporter cannot write), or ``out_dir`` exists (without ``overwrite``).
    """
    if dtype not in EXPORT_DTYPES:
        raise ConfigError(f"--dtype {dtype!r}: choose one of {', '.join(EXPORT_DTYPES)}")
    out = Path(out_dir).absolute()
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file, not a release folder")
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise ConfigError(f"--out {out} exists and is not empty (pass --overwrite to replace it)")
    module, ckpt = load_module(ckpt_path, trust_checkpoint=trust_checkpoint)
    info = ckpt["vidspec"]
    sparrow = _sparrow_draft(module)
    if sparrow is not None and dtype not in RELEASE_DTYPES:
        raise ConfigError(f"--dtype {dtype}: a Sparrow draft is exported in {' or '.join(RELEASE_DTYPES)}")
    # A Sparrow exporter writes float32; the driver narrows the saved draft afterwards.
    ctx = ExportContext(str(ckpt_path), info.get("run_config"), final_metrics(info),
                        dtype="float32" if sparrow is not None else dtype)
    fn = exporter_for(module)
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
    except OSError as e:  # a file where a folder should be, no permission, read-only disk
        raise ConfigError(f"--out {out}: cannot create it ({e.strerror or e})") from None
    try:
        fields = dict(fn(module, tmp, ctx) or {})
        if sparrow is not None and dtype != "float32":
            sparrow.save_pretrained(tmp, dtype=dtype)
        card_text = fields.pop("card", None)
        data_cfg = ((ctx.run_config or {}).get("data") or {})
        data_args = data_cfg.get("init_args", data_cfg) if isinstance(data_cfg, dict) else {}
        manifest = {
            "manifest_version": MANIFEST_VERSION,
            "name": out.name,
            "module": info["module"],
            **fields,
            "git_sha": git_sha(),
            "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "checkpoint": str(Path(ckpt_path).absolute()),
            "summary": card_text,
            "data_path": data_args.get("path"),
            "data": _data_manifest(data_args.get("path")),
            "caption_styles": data_args.get("caption_styles"),
            "data_world_version": _world_version(data_args.get("path")),
            "metrics": ctx.metrics,
            "fingerprint": fingerprint(tmp),
            "weights_dtype": dtype,
            "versions": {"torch": torch.__version__, "transformers": _version("transformers"),
                         "lightning": _version("lightning"), "python": platform.python_version()},
            "training_config": ctx.run_config,
            **({"license": license} if license else {}),
        }
        manifest = portable(manifest)  # no path of this machine in a release
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str) + "\n")
        (tmp / "README.md").write_text(_card(manifest, card_text, license=license))
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _sparrow_draft(module):
    """The module's Sparrow draft network, or None for other modules (a Video-LLM)."""
    from vidspec.decoding.drafters.sparrow import SparrowDraftModel

    draft = getattr(module, "draft", None)
    return draft if isinstance(draft, SparrowDraftModel) else None


def _version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


#: release layouts ``vidspec export --format`` writes
EXPORT_FORMATS = ("vidspec", "speculators")


def export_release(ckpt: str | None = None, out: str | None = None, *, release: str | None = None,
                   overwrite: bool = False, dtype: str = "float32", trust_checkpoint: bool = False,
                   format: str = "vidspec", push_to_hub: str | None = None, private: bool = False,
                   revision: str | None = None, license: str | None = None) -> Path:
    """``vidspec export``: a checkpoint (or an existing Sparrow release) to a release folder, optionally pushed.

    Args:
        ckpt: the training checkpoint; or give ``release`` instead.
        out: the folder to write (required unless only pushing ``release`` in vidspec format).
        release: an existing release folder to convert (``format``) or publish, instead of a checkpoint.
        overwrite, dtype, trust_checkpoint, license: as :func:`export_checkpoint`.
        format: "vidspec" (the Hugging Face folder vidspec loads) or "speculators" (a Sparrow draft in the
            EAGLE-3 layout of the ``speculators`` package, which vLLM and SGLang load; see
            :mod:`vidspec.draft_training.formats.speculators`).
        push_to_hub: upload the written folder to this hub repository (``org/name``).
        private, revision: the repository's visibility when created, and the branch to upload to.

    Returns:
        The folder written (or pushed).

    Raises:
        ConfigError: bad arguments, a bad or untrusted checkpoint, no hub token, a refused upload.
    """
    if format not in EXPORT_FORMATS:
        raise ConfigError(f"--format {format!r}: choose one of {', '.join(EXPORT_FORMATS)}")
    if (ckpt is None) == (release is None):
        raise ConfigError("give --ckpt CHECKPOINT or --release FOLDER (one of them)")
    if push_to_hub:  # fail before a long export when nothing could be published
        from vidspec.draft_training.hub import hub_token

        hub_token()
    if release is not None and not Path(release).is_dir():
        raise ConfigError(f"--release {release}: no such folder")
    if out is None and not (release is not None and format == "vidspec"):
        raise ConfigError("--out FOLDER is required")
    written = Path(release) if release is not None and out is None else None
    if format == "vidspec" and written is None:
        if ckpt is not None:
            written = export_checkpoint(ckpt, out, overwrite=overwrite, dtype=dtype, trust_checkpoint=trust_checkpoint,
                                        license=license)
        else:
            written = Path(out).absolute()
            if written.exists() and any(written.iterdir()) and not overwrite:
                raise ConfigError(f"--out {written} exists and is not empty (pass --overwrite to replace it)")
            shutil.copytree(release, written, dirs_exist_ok=True)
    elif format == "speculators":
        from vidspec.draft_training.formats.speculators import export_speculators

        if ckpt is not None:
            tmp = Path(out).absolute().parent / f".{Path(out).name}.vidspec-{uuid.uuid4().hex[:8]}"
            try:
                export_checkpoint(ckpt, tmp, dtype=dtype, trust_checkpoint=trust_checkpoint, license=license)
                written = export_speculators(tmp, out, overwrite=overwrite, dtype=dtype)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        else:
            written = export_speculators(release, out, overwrite=overwrite, dtype=dtype)
    if push_to_hub:
        from vidspec.draft_training.hub import push_release

        print(push_release(written, push_to_hub, private=private, revision=revision, license=license))
    return written


#: ``vidspec export`` options that are switches: given alone they mean true
SWITCHES = ("--overwrite", "--trust_checkpoint", "--private")


def expand_switches(argv: list[str]) -> list[str]:
    """``--private`` -> ``--private true`` where no value follows (jsonargparse's booleans take one)."""
    out: list[str] = []
    for i, tok in enumerate(argv):
        out.append(tok)
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if tok in SWITCHES and (nxt is None or nxt.lower() not in ("true", "false", "1", "0", "yes", "no")):
            out.append("true")
    return out
