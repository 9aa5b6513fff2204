"""Model cards of releases, built with huggingface_hub's ``ModelCard``/``ModelCardData``.

A card is made from the release's ``manifest.json`` alone, so it can be written again at any time
(``vidspec export`` writes it; a hub push renders it again with the repository id). Its YAML header
carries what the Hub indexes (``base_model`` = the target for a draft, ``library_name``, ``tags``,
``license``, ``datasets``); the body says what the model is, the exact decode command and Python
snippet, the training facts read from the run's resolved config and data manifest, and the figures
the export knows. Nothing in it names a path of the machine that exported it (see :func:`portable`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

#: Tags every vidspec release carries; a kind adds its own.
BASE_TAGS = ("vidspec", "video-llm", "speculative-decoding")
#: Strings that look like a path on one machine (an absolute POSIX path or a home folder).
_MACHINE_PATH = re.compile(r"^(/|~/|[A-Za-z]:\\)")


def is_hub_id(name: Any) -> bool:
    """Whether ``name`` reads as a hub repository id (``org/name``), not a path or a built-in name."""
    if not isinstance(name, str) or name.count("/") != 1 or name.startswith((".", "/", "~")):
        return False
    org, repo = name.split("/")
    return bool(org) and bool(repo) and not Path(name).exists()


def portable(value: Any, root: str | Path | None = None) -> Any:
    """``value`` (a JSON-like tree) with every machine path made relative or reduced to its last part.

    Absolute paths under ``root`` (default: the current directory) become relative to it; other
    absolute paths keep only their final component, so a manifest written on one machine names no
    folder of it.
    """
    base = Path(root or os.getcwd()).resolve()
    if isinstance(value, dict):
        return {k: portable(v, base) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(v, base) for v in value]
    if isinstance(value, str) and _MACHINE_PATH.match(value):
        p = Path(os.path.expanduser(value))
        try:
            return str(p.resolve().relative_to(base))
        except ValueError:
            return p.name or value
    return value


def _get(tree: dict | None, *keys: str) -> Any:
    """``tree[k1][k2]...`` through LightningCLI's ``init_args`` levels; None where absent."""
    node: Any = tree or {}
    for k in keys:
        if not isinstance(node, dict):
            return None
        node = node.get("init_args", node) if k not in node and "init_args" in node else node
        node = node.get(k) if isinstance(node, dict) else None
    return node


def training_facts(manifest: dict) -> list[str]:
    """Card lines of how the release was trained, read from the resolved config and the data manifest."""
    cfg = manifest.get("training_config") or {}
    trainer, model, data = cfg.get("trainer") or {}, cfg.get("model") or {}, cfg.get("data") or {}
    facts = [f"- module: `{manifest.get('module', '?')}`"]
    steps = (manifest.get("metrics") or {}).get("global_step", _get(trainer, "max_steps") or "unknown")
    facts.append(f"- steps: {steps}" + (" (continuing the model below)" if manifest.get("init_from") else ""))
    if manifest.get("init_from"):
        facts.append(f"- initialised from: `{manifest['init_from']}` (its own card and manifest say how it was "
                     "trained)")
    hw = [str(v) for v in (_get(trainer, "accelerator"), _get(trainer, "devices") and
                           f"{_get(trainer, 'devices')} device(s)", _get(trainer, "precision") and
                           f"precision {_get(trainer, 'precision')}") if v]
    if hw:
        facts.append(f"- trainer: {', '.join(hw)}")
    optim = _get(model, "optim") or {}
    batch = _get(data, "batch_size")
    if batch or optim.get("lr"):
        facts.append(f"- batch size {batch if batch is not None else '?'}, learning rate "
                     f"{optim.get('lr', '?')} (warm-up {optim.get('warmup_steps', '?')} steps, cosine)")
    loss = _get(model, "loss") or {}
    if loss.get("mtp_steps"):
        facts.append(f"- distillation: {loss.get('distill', '?')} loss over {loss['mtp_steps']} multi-token "
                     "prediction steps")
    facts.extend(data_facts(manifest))
    if manifest.get("git_sha"):
        facts.append(f"- code: vidspec commit `{manifest['git_sha']}`")
    return facts


def data_facts(manifest: dict) -> list[str]:
    """Card lines about the training data: its manifest's summary where the export could read it."""
    d = manifest.get("data") or {}
    styles = manifest.get("caption_styles")
    name = d.get("name") or manifest.get("data_path") or "unknown"
    line = f"- data: `{name}`"
    if d.get("format") == "synthvid":
        c = d.get("config") or {}
        line += (f" (SynthVid, world version {d.get('world_version', 1)}: {c.get('num_videos', '?')} rendered "
                 f"videos, preset {c.get('preset', '?')}, {c.get('frames', '?')} frames at {c.get('size', '?')}"
                 + (f"; splits {d['splits']}" if d.get("splits") else "") + ")")
    if styles:
        line += f"; caption styles {list(styles)}"
    return [line]


def _python_use(build_args: str, *body: str) -> list[str]:
    """The card's Python example: build a decoder with ``build_decoder(build_args)``, then the ``body`` lines."""
    return ["```python", "from vidspec.decoding import build_decoder, read_video", "from vidspec.decoding.types import Request",
            "", f"decoder = build_decoder({build_args})", *body, "```"]


def _use(manifest: dict, repo: str) -> list[str]:
    """The Use section: the exact decode command and Python snippet for this kind of release."""
    if manifest.get("kind") == "sparrow-draft":
        target = manifest.get("target_id") or "TARGET"
        return [
            "## Use",
            "",
            f"A Sparrow draft is not a model on its own: it drafts for its target, `{target}`, whose embeddings, "
            "LM head and (with `head_norm: target`) final norm it shares. Loading it against another target is "
            "refused (the manifest holds the target's fingerprint).",
            "",
            "```bash",
            f"vidspec generate --target {target} --method sparrow --sparrow {repo} \\",
            '    --video clip.mp4 --prompt "Describe the video in detail."',
            "```",
            "",
            *_python_use(f'"sparrow", target="{target}", draft="{repo}"',
                         'clip = read_video("clip.mp4")',
                         'print(decoder.generate(Request("Describe the video in detail.", clip), max_new_tokens=128).text)'),
            "",
            f"The network alone: `SparrowDraftModel.from_pretrained(\"{repo}\")` "
            "(`vidspec.decoding.drafters.sparrow`; `transformers.AutoModel` once that module is imported). "
            "`vidspec export --format speculators` writes the EAGLE-3 layout vLLM and SGLang read (see the "
            "project's docs/releases.md for what such an engine does differently).",
            "",
        ]
    return [
        "## Use",
        "",
        "```bash",
        f'vidspec generate --target {repo} --method ar --video clip.mp4 --prompt "Describe the video in detail."',
        "```",
        "",
        *_python_use(f'"ar", target="{repo}"',
                     'print(decoder.generate(Request("Describe the video in detail.", read_video("clip.mp4"))).text)'),
        "",
        f"`vidspec.decoding.models.load_target(\"{repo}\")` returns the model alone; the frame budget and adapter "
        "options are in `vidspec.json`. As a target, pair it with a Sparrow draft (`--method sparrow --sparrow "
        "DRAFT`) or a smaller Video-LLM of its family (`--method sd --draft DRAFT`).",
        "",
    ]


def _measured(manifest: dict) -> list[str]:
    """What the export knows about acceptance and speed: simulated acceptance in training, measured runs."""
    lines = []
    metrics = manifest.get("metrics") or {}
    for key in ("val/sim_accept_len", "train/sim_accept_len"):
        if isinstance(metrics.get(key), (int, float)):
            lines.append(f"- simulated acceptance length ({key.split('/')[0]} batches, teacher forcing): "
                         f"{metrics[key]:.3g} tokens per round")
            break
    for m in manifest.get("measured") or []:
        lines.append(f"- {m.get('what', 'measured')}: {m.get('value')} ({m.get('where', 'conditions not recorded')})")
    if not lines:
        return []
    return ["## Measured", "", *lines, ""]


def card_data(manifest: dict, license: str | None = None):
    """The card's YAML metadata (a ``huggingface_hub.ModelCardData``)."""
    from huggingface_hub import ModelCardData

    kind = manifest.get("kind")
    tags = [*BASE_TAGS, *(["sparrow", "eagle", "draft-model"] if kind == "sparrow-draft" else ["video-text-to-text"])]
    base = manifest.get("target_id") if kind == "sparrow-draft" else manifest.get("init_from")
    data = (manifest.get("data") or {}).get("name")
    return ModelCardData(
        license=license or manifest.get("license") or "other",
        library_name="vidspec",
        tags=tags,
        base_model=base if is_hub_id(base) else None,
        datasets=[data] if data else None,
        pipeline_tag=None if kind == "sparrow-draft" else "video-text-to-text",
    )


def release_card(manifest: dict, summary: str | None = None, repo: str | None = None, license: str | None = None):
    """The ``huggingface_hub.ModelCard`` of a release.

    Args:
        manifest: the release's manifest (``vidspec export`` writes it).
        summary: the exporter's paragraph about the model (what it is, its size).
        repo: how users will name the release (a hub id after a push; the folder name by default).
        license: the SPDX id for the header (default: the manifest's ``license``, else "other").
    """
    from huggingface_hub import ModelCard

    name = repo or manifest.get("name", "release")
    data = manifest.get("data") or {}
    summary = summary or manifest.get("summary") or "A vidspec model."
    # An exporter's own "Decode: ..." line names a placeholder folder; the Use section below gives the exact command.
    summary = "\n\n".join(p for p in summary.split("\n\n") if not p.startswith("Decode:"))
    synthetic = data.get("format") == "synthvid"
    body = [
        f"# {manifest.get('name', name)}",
        "",
        summary,
        "",
        *_use(manifest, name),
        "## Training",
        "",
        *training_facts(manifest),
        "",
        "Retrain: `manifest.json` holds the resolved training config under `training_config`; save it as YAML and "
        "run `vidspec train fit --config config.yaml`.",
        "",
        *_measured(manifest),
        "## Final metrics",
        "",
        *[f"- {k}: {v:.4g}" if isinstance(v, float) else f"- {k}: {v}"
          for k, v in sorted((manifest.get("metrics") or {}).items())],
        "",
        f"Weights fingerprint (sha256 of the safetensors files): `{manifest.get('fingerprint', '?')}`",
        "",
    ]
    if synthetic:
        body += ["Trained on SynthVid, synthetic videos that vidspec renders, to test speculative decoding; not a "
                 "general-purpose model.", ""]
    text = f"---\n{card_data(manifest, license).to_yaml()}\n---\n\n" + "\n".join(body)
    return ModelCard(text)
