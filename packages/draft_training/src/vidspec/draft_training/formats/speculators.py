"""A Sparrow draft in the EAGLE-3 layout of the ``speculators`` package (what vLLM and SGLang load).

``vidspec export --format speculators`` writes a folder whose ``config.json`` has
``speculators_model_type: "eagle3"`` and a ``speculators_config`` (greedy proposals, the verifier's
id), and whose ``model.safetensors`` uses EAGLE-3's names: ``embed_tokens``, ``fc``, ``layers.0.*``
(a Llama decoder layer with 2d-wide q/k/v and a ``hidden_norm``), ``norm`` and ``lm_head``.

Sparrow is not exactly an EAGLE-3 draft, so this is the closest variant EAGLE-3 can express:

- **Fusion.** Sparrow computes ``z = FC([e; h])`` and runs a standard layer on it (one RMSNorm of
  ``z``, residual ``z``). EAGLE-3 normalises ``e`` and ``h`` separately, projects the 2d-wide
  ``[norm(e); norm(h)]`` straight into q/k/v, and adds ``h`` as the residual. The export folds the
  FC into q/k/v (``W_q' = [W_q diag(g) W_e, W_q diag(g) W_h]``, ``g`` the layer's input norm), so the
  attention of a fused input is Sparrow's exactly, but the normalisation (per part instead of per
  sum) and the residual (``h`` instead of ``z``) differ: the exported draft is a re-parameterised
  starting point whose acceptance must be measured again (a short EAGLE-3 fine-tune recovers it).
- **Hidden states.** One auxiliary state, the target's penultimate one (``fc`` is the identity),
  where EAGLE-3 drafts usually read three layers.
- **Positions and video.** A serving engine runs the draft over every prompt position, the video's
  included, so the draft attends to visual positions that Sparrow's draft never sees (its cost
  then grows with the video), and it gives text positions the engine's positions (1-D RoPE in the
  draft; Qwen2.5-VL's M-RoPE reduces to it where the three axes agree).
- **Layer.** Qwen2's decoder layer is a Llama layer with q/k/v biases; the export uses Llama's
  layer with ``attention_bias`` and a zero ``o_proj`` bias.

The target's embedding table and LM head (and, with ``head_norm: target``, its final norm) are
written into the folder, because EAGLE-3 checkpoints carry them.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import torch

from vidspec.decoding.errors import ConfigError

#: speculators release whose schema this writes (the version its test installs)
SPECULATORS_VERSION = "0.9.0"
#: draft tokens a serving engine proposes per round by default (Sparrow's default chain length)
DEFAULT_SPECULATIVE_TOKENS = 4


def eagle3_config(draft, target_model, target_id: str, speculative_tokens: int = DEFAULT_SPECULATIVE_TOKENS) -> dict:
    """The ``config.json`` of the EAGLE-3 export of ``draft`` (a SparrowDraftModel) for ``target_model``."""
    c = draft.config
    lc = c.layer_config
    d = c.hidden_size
    heads = int(lc["num_attention_heads"])
    rope = dict(lc.get("rope_parameters") or {"rope_type": "default", "rope_theta": lc.get("rope_theta", 10000.0)})
    rope.pop("mrope_section", None)
    rope.pop("mrope_interleaved", None)
    layers = int(target_model.config.get_text_config().num_hidden_layers)
    arch = list(getattr(target_model.config, "architectures", None) or [type(target_model).__name__])
    return {
        "architectures": ["Eagle3DraftModel"],
        "speculators_model_type": "eagle3",
        "speculators_version": SPECULATORS_VERSION,
        "draft_vocab_size": c.vocab_size,
        "target_hidden_size": None,
        # HF hidden_states[-2] (Sparrow's h) is the input of the last decoder layer.
        "eagle_aux_hidden_state_layer_ids": [layers - 1],
        "norm_before_residual": False,
        "norm_before_fc": False,
        "fc_norm": False,
        "norm_output": False,
        "embed_requires_grad": False,
        "tie_word_embeddings": False,
        "dtype": "float32",
        "transformer_layer_config": {
            "model_type": "llama",
            "hidden_size": d,
            "intermediate_size": int(lc["intermediate_size"]),
            "num_attention_heads": heads,
            "num_key_value_heads": int(lc.get("num_key_value_heads") or heads),
            "head_dim": int(lc.get("head_dim") or d // heads),
            "num_hidden_layers": 1,
            "hidden_act": lc.get("hidden_act", "silu"),
            "rms_norm_eps": float(lc["rms_norm_eps"]),
            "max_position_embeddings": int(lc.get("max_position_embeddings", 32768)),
            "vocab_size": c.vocab_size,
            "attention_bias": True,
            "mlp_bias": False,
            "rope_parameters": rope,
            "tie_word_embeddings": False,
        },
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": int(speculative_tokens),
                                  "verifier_accept_k": 1, "accept_tolerance": 0.0}],
            "verifier": {"name_or_path": target_id or None, "architectures": arch},
        },
    }


@torch.no_grad()
def eagle3_state_dict(draft) -> dict[str, torch.Tensor]:
    """EAGLE-3 weights of a bound SparrowDraftModel (see the module docstring for the mapping)."""
    d = draft.config.hidden_size
    layer, shared = draft.layer, draft.shared
    g = layer.input_layernorm.weight.float()
    w_fc = draft.fc.weight.float()
    w_e, w_h = w_fc[:, :d], w_fc[:, d:]
    fc_bias = draft.fc.bias.float() if draft.fc.bias is not None else None
    out: dict[str, torch.Tensor] = {
        "embed_tokens.weight": shared.embed.weight,
        "fc.weight": torch.eye(d),
        "layers.0.input_layernorm.weight": torch.ones(d),
        "layers.0.hidden_norm.weight": torch.ones(d),
        "layers.0.post_attention_layernorm.weight": layer.post_attention_layernorm.weight,
        "layers.0.self_attn.o_proj.weight": layer.self_attn.o_proj.weight,
        "layers.0.self_attn.o_proj.bias": torch.zeros(layer.self_attn.o_proj.out_features),
        "norm.weight": (draft.norm if draft.norm is not None else shared.final_norm).weight,
        "lm_head.weight": shared.lm_head.weight,
    }
    for name in ("gate_proj", "up_proj", "down_proj"):
        out[f"layers.0.mlp.{name}.weight"] = getattr(layer.mlp, name).weight
    for name in ("q_proj", "k_proj", "v_proj"):
        proj = getattr(layer.self_attn, name)
        w = proj.weight.float() * g  # W diag(g)
        out[f"layers.0.self_attn.{name}.weight"] = torch.cat([w @ w_e, w @ w_h], dim=1)
        bias = proj.bias.float() if proj.bias is not None else torch.zeros(proj.out_features)
        if fc_bias is not None:  # a constant in the fused input: folded into the bias (exact before the norm)
            bias = bias + w @ fc_bias
        out[f"layers.0.self_attn.{name}.bias"] = bias
    return {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in out.items()}


def export_speculators(release: str | Path, out_dir: str | Path, *, overwrite: bool = False,
                       dtype: str = "float32", target=None) -> Path:
    """Write the EAGLE-3 (``speculators``) export of a Sparrow release folder.

    Args:
        release: a Sparrow release (``vidspec export`` output, or a hub snapshot).
        out_dir: the folder to write.
        overwrite: replace ``out_dir`` if it is not empty.
        dtype: "float32" or "bfloat16" weights.
        target: the target adapter (default: ``load_target`` of the release's ``target_id``); its
            embedding table and LM head are written too.

    Raises:
        ConfigError: not a Sparrow release, an unknown dtype, an existing folder, a missing target.
    """
    from safetensors.torch import save_file

    from vidspec.decoding.drafters.sparrow import SparrowDraftModel
    from vidspec.decoding.errors import ModelError
    from vidspec.decoding.fsutil import replace_dir
    from vidspec.decoding.models import load_target

    if dtype not in ("float32", "bfloat16"):
        raise ConfigError(f"--dtype {dtype}: the speculators export is written in float32 or bfloat16")
    out = Path(out_dir).absolute()
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise ConfigError(f"--out {out} exists and is not empty (pass --overwrite to replace it)")
    try:
        draft = SparrowDraftModel.from_pretrained(release)
        target_id = draft.manifest.get("target_id") or draft.config.target_id
        if target is None:
            if not target_id:
                raise ConfigError(f"{release}: the release names no target (target_id); it is needed for the "
                                  "embeddings and LM head an EAGLE-3 checkpoint carries")
            target = load_target(target_id, dtype="float32")
        draft = SparrowDraftModel.from_pretrained(release, target=target)
    except ModelError as e:
        raise ConfigError(f"--format speculators: {e}") from None
    config = eagle3_config(draft, target.model, target_id)
    config["dtype"] = dtype
    tensors = {k: v.to(getattr(torch, dtype)) for k, v in eagle3_state_dict(draft).items()}
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        manifest = {"kind": "sparrow-draft-eagle3", "name": out.name, "source_release": Path(release).name,
                    "target_id": target_id, "target_fingerprint": draft.manifest.get("target_fingerprint"),
                    "speculators_version": SPECULATORS_VERSION, "weights_dtype": dtype,
                    "variant": "Sparrow folded into EAGLE-3 (see docs/releases.md: what differs)"}
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        (tmp / "README.md").write_text(_card(manifest, config))
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _card(manifest: dict, config: dict) -> str:
    """The export's model card: YAML metadata, how engines load it, and what differs from Sparrow."""
    from huggingface_hub import ModelCardData

    from vidspec.draft_training.cards import is_hub_id

    target = manifest.get("target_id") or "TARGET"
    data = ModelCardData(library_name="speculators", license="other",
                         tags=["vidspec", "speculative-decoding", "eagle3", "sparrow", "speculators"],
                         base_model=target if is_hub_id(target) else None)
    body = "\n".join([
        f"# {manifest['name']}",
        "",
        f"The Sparrow draft `{manifest['source_release']}` for `{target}`, written in the EAGLE-3 layout of the "
        f"`speculators` package ({SPECULATORS_VERSION}): `speculators_model_type: eagle3`, one Llama decoder layer "
        f"reading the target's hidden state at layer {config['eagle_aux_hidden_state_layer_ids'][0]} (its "
        "penultimate state).",
        "",
        "## Use",
        "",
        "```bash",
        f"vllm serve {target} --speculative-config '{{\"model\": \"THIS_FOLDER\", \"num_speculative_tokens\": 4, "
        "\"method\": \"eagle3\"}'",
        "```",
        "",
        "## What differs from vidspec's Sparrow decoder",
        "",
        "- EAGLE-3 normalises the token embedding and the hidden state separately and adds the hidden state as the "
        "residual; Sparrow fuses them with one FC and normalises the sum. The FC is folded into q/k/v, so this is a "
        "re-parameterised variant, not the same function: measure its acceptance (a short EAGLE-3 fine-tune from "
        "these weights recovers it).",
        "- The engine runs the draft over every prompt position, the video's included: the draft attends to visual "
        "positions, which Sparrow's draft never does, and its step cost grows with the video.",
        "- Positions are the engine's, with 1-D RoPE in the draft.",
        "- Verification is the engine's strict (lossless) one; vidspec's loose verifiers (LVSpec) are not available.",
        "",
    ])
    return f"---\n{data.to_yaml()}\n---\n\n{body}"
