"""Engine diagnostics on the H200: where the 7B-shape AR/verify/prefill/vision time goes (session 6).

Run from the repository root on the GPU machine, vidspec importable, ``OUT`` an output folder::

    OUT=runs/diag python benchmarks/engine_diag_gpu.py        # ~5 min on one H200 (AUTOTUNE=0: ~2 min)

On a Qwen2.5-VL-7B-shaped model with random bf16 weights (``engine_gpu.build``): the AR and K=8
verify graph replays at 2k context with a torch.profiler kernel table each (``prof-step{1,9}.txt``,
kernels per step and their summed device time); the LM prefill of 25,152 positions in 8k chunks vs
one chunk vs HF (``prof-prefill*.txt``); the fast vision tower at 25,088 visual tokens eager vs
compiled, with its error against HF; and, unless ``AUTOTUNE=0``, the fused pieces compiled with
``max-autotune-no-cudagraphs`` and coordinate-descent tuning. Writes ``exp1.json`` to ``OUT``.
"""

import gc
import json
import os
import sys
import time

import torch

sys.path.insert(0, "benchmarks")
import engine_gpu as eg
from torch.profiler import ProfilerActivity, profile

from vidspec.decoding.fast.lm import FastLM
from vidspec.decoding.fast.vision import FastQwenVision

OUT = os.environ["OUT"]
res = {}
MM = ("gemm", "gemv", "cutlass", "nvjet", "sm90", "cublas", "splitk", "xmma")


def save():
    json.dump(res, open(f"{OUT}/exp1.json", "w"), indent=1)


def prof(fn, n, name):
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    ka = p.key_averages()
    open(f"{OUT}/prof-{name}.txt", "w").write(ka.table(sort_by="cuda_time_total", row_limit=45))
    tot = mm = 0.0
    cnt = 0
    for e in ka:
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if e.key.startswith("cuda") or "Memcpy" in e.key or "Memset" in e.key and False:
            continue
        tot += t
        cnt += e.count
        if any(s in e.key.lower() for s in MM):
            mm += t
    r = dict(kernel_ms_per_call=tot / n / 1e3, matmul_ms_per_call=mm / n / 1e3, kernels_per_call=cnt / n)
    print(name, r, flush=True)
    return r


torch.backends.cuda.matmul.allow_tf32 = False
with torch.inference_mode():
    bw = eg.copy_bandwidth()
    res["bw"] = bw
    model = eg.build("qwen2.5-vl")
    lm, head = model.model.language_model, model.lm_head
    flm = FastLM(lm, head, max_len=32768, graphs=True, compile=None)
    res["limit_ms"] = flm.weight_bytes() / bw * 1e3
    eg.fill_cache(flm, 2048)
    for t in (1, 9):
        ms = eg.our_step_ms(flm, 2048, t, 30, host=False)
        lb = flm._bucket(2048 + t)
        res[f"replay{t}_ms"] = ms
        res[f"prof{t}"] = prof(lambda t=t, lb=lb: flm.replay(t, lb), 20, f"step{t}")
    save()
    # E2 prefill variants at 25k
    prompt = 25088 + 64
    emb = torch.randn(prompt, 3584, device="cuda", dtype=torch.bfloat16) * 0.02
    pos = eg.rope_pos(prompt)
    for chunk in (8192, 32768):

        def pf(chunk=chunk):
            flm.new_cache()
            for c in range(0, prompt, chunk):
                e = min(prompt, c + chunk)
                flm.prefill_chunk(emb[c:e], pos[:, c:e], c, want_hidden=False, last_logits=e == prompt)

        pf()
        res[f"prefill_{chunk}_s"] = min(eg.time_wall(pf) for _ in range(2))
        res[f"prof_prefill_{chunk}"] = prof(pf, 1, f"prefill{chunk}")
        print("prefill", chunk, res[f"prefill_{chunk}_s"], flush=True)
        save()
    from transformers import DynamicCache

    from vidspec.decoding.models.base import _cache_kwarg

    def hf_prefill():
        cache = DynamicCache(config=lm.config)
        o = lm(
            inputs_embeds=emb[None], position_ids=pos[:, None], use_cache=True, **{_cache_kwarg(lm): cache}
        )
        head(o.last_hidden_state[:, -1:])

    hf_prefill()
    res["hf_prefill_s"] = eg.time_wall(hf_prefill)
    res["prof_hf_prefill"] = prof(hf_prefill, 1, "hfprefill")
    save()
    emb = None  # free it (the closures above are done with it)
    gc.collect()
    torch.cuda.empty_cache()
    # E3 vision
    t_, h = 32, 56
    grid = torch.tensor([[t_, h, h]], device="cuda")
    px = torch.randn(t_ * h * h, 3 * 2 * 14 * 14, device="cuda", dtype=torch.bfloat16)
    ref = None
    for comp in (False, True):
        fv = FastQwenVision(model.model.visual, compile=comp)
        t0 = time.perf_counter()
        o = fv(px, grid)
        torch.cuda.synchronize()
        res[f"vision_first_call_s_{comp}"] = time.perf_counter() - t0
        res[f"vision_s_compile{comp}"] = min(eg.time_wall(lambda fv=fv: fv(px, grid)) for _ in range(2))
        if ref is None:
            ref = model.model.visual(px, grid_thw=grid).pooler_output.float()
        res[f"vision_relerr_compile{comp}"] = float((o.float() - ref).abs().max() / ref.abs().max())
        res[f"prof_vision_{comp}"] = prof(lambda fv=fv: fv(px, grid), 1, f"vision{comp}")
        print("vision", comp, res[f"vision_s_compile{comp}"], flush=True)
        save()
    px = ref = None
    gc.collect()
    torch.cuda.empty_cache()
    # E1b: max-autotune pieces
    if os.environ.get("AUTOTUNE", "1") == "1":
        import torch._inductor.config as ic

        ic.coordinate_descent_tuning = True
        t0 = time.perf_counter()
        flm2 = FastLM(
            lm, head, max_len=4096, graphs=True, compile=None, compile_mode="max-autotune-no-cudagraphs"
        )
        eg.fill_cache(flm2, 2048)
        for t in (1, 9):
            res[f"autotune_replay{t}_ms"] = eg.our_step_ms(flm2, 2048, t, 30, host=False)
            lb = flm2._bucket(2048 + t)
            res[f"prof_autotune{t}"] = prof(lambda t=t, lb=lb: flm2.replay(t, lb), 20, f"autotune{t}")
            print("autotune", t, res[f"autotune_replay{t}_ms"], flush=True)
        res["autotune_setup_s"] = time.perf_counter() - t0
        save()
save()
print(json.dumps({k: v for k, v in res.items() if not isinstance(v, dict)}, indent=1))
