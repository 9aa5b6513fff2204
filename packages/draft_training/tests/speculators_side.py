"""Run by test_speculators_export.py in the pinned ``speculators`` environment (no vidspec there).

    python speculators_side.py EXPORT_FOLDER INPUTS.safetensors OUTPUTS.safetensors

Loads the export with speculators, validates its config, and writes the outputs of the modules that
vidspec's test compares with its own draft: attention of a fused input, the post-attention block,
the output head, the rotary tables, and one full decoder-layer pass.
"""

from __future__ import annotations

import json
import sys

import torch
from safetensors.torch import load_file, save_file


def main(folder: str, inputs: str, outputs: str) -> None:
    from speculators import SpeculatorModel, SpeculatorModelConfig
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig

    cfg = SpeculatorModelConfig.from_pretrained(folder)  # pydantic validation of the whole schema
    assert isinstance(cfg, Eagle3SpeculatorConfig), type(cfg)
    model = SpeculatorModel.from_pretrained(folder)
    assert isinstance(model, Eagle3DraftModel), type(model)
    saved = load_file(f"{folder}/model.safetensors")
    state = model.state_dict()
    for k, v in saved.items():  # every exported tensor landed where speculators reads it
        assert k in state and torch.equal(state[k].to(v.dtype).cpu(), v), k
    model = model.float().eval()
    # Causal SDPA (no mask) in both implementations: speculators' default flex attention wants a block mask.
    model.config.transformer_layer_config._attn_implementation = "sdpa"
    x = load_file(inputs)
    layer = model.layers[0]
    with torch.no_grad():
        pos = x["positions"][None]
        fused = torch.cat([x["a"], x["b"]], dim=-1)[None]
        cos, sin = model.rotary_emb(fused, pos)
        attn, _ = layer.self_attn(hidden_states=fused, position_embeddings=(cos, sin), attention_mask=None)
        r = x["r"][None]
        block = r + layer.mlp(layer.post_attention_layernorm(r))
        logits = model.lm_head(model.norm(x["r"]))
        full = layer(torch.cat([model.embed_tokens(x["ids"][None]), model.fc(x["b"][None])], dim=-1),
                     position_embeddings=(cos, sin), attention_mask=None)
        full = full[0] if isinstance(full, tuple) else full
    save_file({"attn": attn[0].contiguous(), "block": block[0].contiguous(), "logits": logits.contiguous(),
               "cos": cos[0].contiguous(), "sin": sin[0].contiguous(), "full": full[0].contiguous()}, outputs)
    print(json.dumps({"config": type(cfg).__name__, "model": type(model).__name__,
                      "verifier": cfg.speculators_config.verifier.name_or_path,
                      "aux_layers": cfg.eagle_aux_hidden_state_layer_ids, "draft_vocab_size": cfg.draft_vocab_size}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
