"""Step cost by step length T on a testbed-shaped LM (24 layers x 512, vocabulary 929, random bf16 weights).

Run on the GPU machine from the repository root (vidspec importable)::

    OUT=runs/tstep python benchmarks/testbed_step_gpu.py        # ~1-2 min (one graph capture per T)

For T = 1, 5, 9, 17, 33, 49, 64 after 300 cached positions: the median ms of the FastLM step's
graph replay alone and with its host input copy (``engine_gpu.our_step_ms``). Session 6 used it to
check whether the testbed's steps are bound by launches and kernel latency (cost flat in T) or by
work. Writes ``exp5.json`` to ``OUT``.
"""

import json
import os
import sys

import torch
import transformers

sys.path.insert(0, "benchmarks")
import engine_gpu as eg

from vidspec.decoding.fast.lm import FastLM

OUT = os.environ["OUT"]
res = {}
with torch.inference_mode():
    for name, L, d in (("testbed24", 24, 512),):
        cfg = transformers.Qwen2Config(
            vocab_size=929,
            hidden_size=d,
            intermediate_size=4 * d,
            num_hidden_layers=L,
            num_attention_heads=8,
            num_key_value_heads=4,
            rope_parameters=eg.ROPE,
        )
        cfg._attn_implementation = "sdpa"
        with torch.device("cuda"):
            m = transformers.Qwen2ForCausalLM._from_config(cfg, dtype=torch.bfloat16).eval()
        flm = FastLM(m.model, m.lm_head, max_len=2048, graphs=True, compile=None)
        eg.fill_cache(flm, 300)
        for t in (1, 5, 9, 17, 33, 49, 64):
            res[f"{name}_T{t}_replay_ms"] = eg.our_step_ms(flm, 300, t, 50, host=False)
            res[f"{name}_T{t}_host_ms"] = eg.our_step_ms(flm, 300, t, 50, host=True)
            print(name, t, res[f"{name}_T{t}_replay_ms"], res[f"{name}_T{t}_host_ms"], flush=True)
json.dump(res, open(f"{OUT}/exp5.json", "w"), indent=1)
