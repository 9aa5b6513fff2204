"""GPU engine benchmark: HF decoding vs vidspec's fast path on 7B-shaped Video-LLMs (random bf16 weights).

Run from the repository root on the GPU machine (our packages are not pip-installed there, so put
their sources on PYTHONPATH; only torch and transformers are needed)::

    PYTHONPATH=packages/decoding/src:packages/draft_training/src:packages/evaluation/src \\
        python benchmarks/engine_gpu.py --out "$OUT"            # full run, < 8 min on one H200
    PYTHONPATH=... python benchmarks/engine_gpu.py --quick --out "$OUT"   # smoke run, ~2 min
    # the two bandwidth bars only (AR and K=8 verify vs the bandwidth limit, Qwen shape, 2k), with the split-K
    # verify path and a table from benchmarks/gemv_sweep_gpu.py --table-out:
    VIDSPEC_GEMV_TABLE=$OUT/gemv_table.json PYTHONPATH=... python benchmarks/engine_gpu.py --families qwen2.5-vl \
        --contexts 2048 --skip-hf --no-draft --no-e2e --variants fused,gemv --gemv-verify --out "$OUT"

What it measures (the conventions of docs/algorithms.md, "Metrics": batch 1, warm-up excluded, CUDA events /
``torch.cuda.synchronize`` around every timer, medians of repeated runs):

- Memory-bandwidth ceiling: a large device-to-device copy (bytes read + written / time).
- For a Qwen2.5-VL-7B-shaped and a LLaVA-OneVision-7B-shaped model (the real 7B sizes, weights
  drawn on the GPU by HF's initialiser), at 2k and 16k tokens of context, side by side:
  HF ``generate`` eager (dynamic cache), HF ``generate`` with ``cache_implementation="static"``
  (auto-compiled; by default at 2k on the Qwen shape only: its compile dominates the run time), our AR step (CUDA graph,
  with and without ``torch.compile`` fusion), our host-driven AR loop (one sync per token, what
  ``SpeculativeDecoder`` + ``FastTarget`` does), the same steps with the Triton small-M weight
  products (``FastLM(gemv=True)``, ``--no-gemv`` skips them; with ``--gemv-verify`` ``gemv="all"``, so the
  verify step takes the split-K Triton path too, per ``VIDSPEC_GEMV_TABLE`` when set), our K=8 verify step (9 tokens), and a
  Sparrow-like one-layer draft step of the same width attending to text only (with the full LM
  head and with a 32k-token head as EAGLE-3 drafts use).
- The bandwidth limit of a step is (bytes of weights a step reads [+ the KV cache it reads]) /
  measured copy bandwidth; ratios to it are printed (targets: AR <= 1.25x, K=8 verify <= 1.4x,
  draft step <= 0.3 ms).
- End to end for a 25k-visual-token video on the Qwen2.5-VL shape (64 frames at 784 px; 16
  frames at 448 px with ``--quick``): vision tower HF vs ours (compiled, and eager for reference),
  LM prefill HF vs ours (``--prefill-chunk``, one chunk by default),
  and 512 new tokens (ours: measured AR steps; HF eager: measured per-token cost x 512).

Results: a table on stdout and ``engine_gpu.json`` (machine info, versions, git SHA, all numbers)
in ``--out`` (default ``benchmarks/results``). HF rows that fail are recorded with their error and
the run continues.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

from vidspec.evaluation.runner import git_info, machine_info

QWEN_TEXT = dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                 num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=128000, rms_norm_eps=1e-6,
                 hidden_act="silu", tie_word_embeddings=False)
QWEN_VISION = dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=3584, patch_size=14,
                   spatial_merge_size=2, temporal_patch_size=2, window_size=112, fullatt_block_indexes=[7, 15, 23, 31],
                   tokens_per_second=2, hidden_act="silu", in_channels=3)
ROPE = {"rope_type": "default", "rope_theta": 1e6}
SIGLIP = dict(model_type="siglip_vision_model", hidden_size=1152, intermediate_size=4304, num_hidden_layers=26,
              num_attention_heads=16, image_size=384, patch_size=14)


# ---- helpers -----------------------------------------------------------------------------------
def sync() -> None:
    torch.cuda.synchronize()


def time_cuda(fn, reps: int, warmup: int = 2) -> float:
    """Median milliseconds of ``fn()`` over ``reps`` runs (CUDA events, after ``warmup`` runs)."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def time_wall(fn) -> float:
    """Seconds of one ``fn()`` call, synchronised on both sides."""
    sync()
    t = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t


def copy_bandwidth(gib: float = 2.0) -> float:
    """Device-to-device copy bandwidth in bytes/s (bytes read + written)."""
    n = int(gib * 2**30) // 2
    src = torch.randn(n, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    ms = time_cuda(lambda: dst.copy_(src), reps=20, warmup=3)
    return 2 * n * 2 / (ms / 1e3)


def build(family: str):
    """A 7B-shaped model with random bf16 weights, initialised on the GPU."""
    import transformers

    if family == "qwen2.5-vl":
        cfg = transformers.Qwen2_5_VLConfig(
            text_config=dict(QWEN_TEXT, rope_parameters=dict(ROPE, mrope_section=[16, 24, 24])),
            vision_config=QWEN_VISION, tie_word_embeddings=False)
        cls = transformers.Qwen2_5_VLForConditionalGeneration
    else:
        cfg = transformers.LlavaOnevisionConfig(
            text_config=dict(QWEN_TEXT, model_type="qwen2", rope_parameters=ROPE), vision_config=SIGLIP,
            tie_word_embeddings=False)
        cls = transformers.LlavaOnevisionForConditionalGeneration
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = cls._from_config(cfg, dtype=torch.bfloat16)
    return model.eval()


def rope_pos(n: int, start: int = 0) -> torch.Tensor:
    return torch.arange(start, start + n, device="cuda")[None].expand(3, n)


def tril(t: int) -> torch.Tensor:
    return torch.ones(t, t, dtype=torch.bool).tril()


# ---- HF baselines ------------------------------------------------------------------------------
def hf_generate_ms_per_token(model, ctx: int, n: int, static: bool) -> float:
    ids = torch.randint(100, 50000, (1, ctx), device="cuda")
    kw = dict(attention_mask=torch.ones_like(ids), do_sample=False, eos_token_id=None, pad_token_id=0)
    if static:
        kw["cache_implementation"] = "static"

    def gen(k):
        return model.generate(ids, max_new_tokens=k, min_new_tokens=k, **kw)

    gen(n)  # warm-up (compiles for the static cache)
    if static:
        # Static-cache shapes depend on max_new_tokens, so time one n-token run and subtract the
        # prefill measured with the eager forward (an approximation, stated in the JSON).
        t_n = time_wall(lambda: gen(n))
        t_pre = time_wall(lambda: model(input_ids=ids, attention_mask=kw["attention_mask"]))
        return (t_n - t_pre) / (n - 1) * 1e3
    gen(1)
    t_n, t_1 = time_wall(lambda: gen(n)), time_wall(lambda: gen(1))
    return (t_n - t_1) / (n - 1) * 1e3


def hf_eager_step_ms(lm, head, ctx: int, t: int, reps: int) -> float:
    """One HF eager forward of ``t`` tokens after ``ctx`` cached positions (dynamic cache)."""
    from transformers import DynamicCache

    from vidspec.decoding.models.base import _cache_kwarg, crop_cache

    cache = DynamicCache(config=lm.config)
    name = _cache_kwarg(lm)
    emb = torch.randn(1, ctx, lm.config.hidden_size, device="cuda", dtype=torch.bfloat16) * 0.02
    lm(inputs_embeds=emb, position_ids=rope_pos(ctx)[:, None] if _is_mrope(lm) else torch.arange(ctx, device="cuda")[None],
       use_cache=True, **{name: cache})
    x = torch.randn(1, t, lm.config.hidden_size, device="cuda", dtype=torch.bfloat16) * 0.02
    pos = rope_pos(t, ctx)[:, None] if _is_mrope(lm) else torch.arange(ctx, ctx + t, device="cuda")[None]

    def step():
        out = lm(inputs_embeds=x, position_ids=pos, use_cache=True, **{name: cache})
        head(out.last_hidden_state)
        crop_cache(cache, ctx)

    return time_cuda(step, reps=reps)


def _is_mrope(lm) -> bool:
    return bool(getattr(lm.rotary_emb, "mrope_section", None))


# ---- our path ----------------------------------------------------------------------------------
def fill_cache(flm, ctx: int) -> None:
    """Prefill ``ctx`` random positions into a FastLM's cache."""
    flm.new_cache()
    emb = torch.randn(ctx, flm.d, device="cuda", dtype=flm.dtype) * 0.02
    flm.prefill_chunk(emb, rope_pos(ctx), 0, want_hidden=False, last_logits=False)


def our_step_ms(flm, ctx: int, t: int, reps: int, host: bool) -> float:
    """Median ms of one T-token step at ``ctx`` (graph replay; with ``host`` the per-step H2D input copy too)."""
    toks, depth, mask = [11] * t, list(range(t)), tril(t)
    flm.step(toks, ctx, ctx, 0, depth, mask)  # capture
    lb = flm._bucket(ctx + t)
    if host:
        return time_cuda(lambda: flm.step(toks, ctx, ctx, 0, depth, mask), reps=reps)
    return time_cuda(lambda: flm.replay(t, lb), reps=reps)


def our_ar_loop_ms(flm, ctx: int, n: int) -> float:
    """Per-token ms of a host-driven greedy loop (one sync per token), n tokens from ``ctx``."""
    def loop():
        tok = 11
        for i in range(n):
            out = flm.step([tok], ctx + i, ctx + i, 0, [0], tril(1))
            tok = int(out.argmax[0])

    loop()
    return time_wall(loop) / n * 1e3


def kv_bytes(flm, ctx: int) -> int:
    return flm.num_layers * 2 * ctx * flm.hkv * flm.hd * flm.kv.element_size()


# ---- the run -----------------------------------------------------------------------------------
def bench_family(family: str, args, bw: float, results: dict) -> None:
    from vidspec.decoding.fast.lm import FastLM

    print(f"\n== {family}: building 7B-shaped model", flush=True)
    model = build(family)
    lm, head = model.model.language_model, model.lm_head
    fam = results.setdefault(family, {"contexts": {}})
    max_ctx = max(args.contexts)
    graph_lm = FastLM(lm, head, max_len=max_ctx + 1024, graphs=True, compile=False)
    fused_lm = FastLM(lm, head, max_len=max_ctx + 1024, graphs=True, compile=None) if not args.no_compile else None
    timed = {"graph": graph_lm if "graph" in args.variants else None,
             "fused": fused_lm if "fused" in args.variants else None}
    # The same, with the Triton small-M weight products (vidspec.decoding.fast.gemv) instead of cuBLAS.
    gemv_lm = None
    if not (args.no_compile or args.no_gemv) and "gemv" in args.variants:
        fam["gemv_mode"] = "all" if args.gemv_verify else True
        try:
            gemv_lm = FastLM(lm, head, max_len=max_ctx + 1024, graphs=True, compile=None, gemv=fam["gemv_mode"])
        except Exception as e:  # an optional variant failing must not lose the rest of the run
            fam["gemv_error"] = f"{type(e).__name__}: {e}"[:300]
            traceback.print_exc()
    wbytes = graph_lm.weight_bytes()
    fam["weight_bytes"] = wbytes
    fam["bandwidth_limit_ms"] = wbytes / bw * 1e3
    for ctx in args.contexts:
        row: dict = {}
        fam["contexts"][str(ctx)] = row
        lim = wbytes / bw * 1e3
        lim_kv = (wbytes + kv_bytes(graph_lm, ctx)) / bw * 1e3
        row["limit_ms"], row["limit_with_kv_ms"] = lim, lim_kv
        print(f"-- context {ctx}", flush=True)
        for key, fn in [] if args.skip_hf else [
            ("hf_generate_eager_ms", lambda ctx=ctx: hf_generate_ms_per_token(model, ctx, args.gen_tokens, static=False)),
            ("hf_generate_static_ms", (lambda ctx=ctx: hf_generate_ms_per_token(model, ctx, args.gen_tokens, static=True))
             if ctx in args.hf_static_contexts and (family == "qwen2.5-vl" or args.hf_static_all) else None),
            ("hf_eager_step1_ms", lambda ctx=ctx: hf_eager_step_ms(lm, head, ctx, 1, args.reps)),
            ("hf_eager_step9_ms", lambda ctx=ctx: hf_eager_step_ms(lm, head, ctx, 9, args.reps)),
        ]:
            if fn is None:
                continue
            try:
                row[key] = fn()
            except Exception as e:  # a baseline failing must not lose the rest of the run
                row[key] = None
                row[key.replace("_ms", "_error")] = f"{type(e).__name__}: {e}"[:300]
                traceback.print_exc()
            gc.collect()
            torch.cuda.empty_cache()
        for tag, flm in [("graph", timed["graph"]), ("fused", timed["fused"]), ("gemv", gemv_lm)]:
            if flm is None:
                continue
            t0 = time.perf_counter()
            try:
                fill_cache(flm, ctx)
                row[f"ours_{tag}_ar_ms"] = our_step_ms(flm, ctx, 1, args.reps, host=True)
                row[f"ours_{tag}_ar_replay_ms"] = our_step_ms(flm, ctx, 1, args.reps, host=False)
                row[f"ours_{tag}_verify9_ms"] = our_step_ms(flm, ctx, 9, args.reps, host=True)
                row[f"ours_{tag}_verify9_replay_ms"] = our_step_ms(flm, ctx, 9, args.reps, host=False)
                row[f"ours_{tag}_ar_loop_ms"] = our_ar_loop_ms(flm, ctx, args.loop_tokens)
            except Exception as e:  # an optional variant failing must not lose the rest of the run
                if tag != "gemv":
                    raise
                row[f"ours_{tag}_error"] = f"{type(e).__name__}: {e}"[:300]
                traceback.print_exc()
            row[f"ours_{tag}_setup_s"] = time.perf_counter() - t0
        best = min(v for k, v in row.items() if k.endswith("_ar_ms") and k.startswith("ours") and v)
        best9 = min(v for k, v in row.items() if k.endswith("_verify9_ms") and v)
        row["ar_vs_limit"], row["verify9_vs_limit"] = best / lim, best9 / lim
        row["ar_vs_limit_with_kv"], row["verify9_vs_limit_with_kv"] = best / lim_kv, best9 / lim_kv
    # Sparrow-like draft: one decoder layer of the target's width, text-only KV (its cost does not
    # depend on the number of visual tokens because the draft never attends to them).
    if not args.no_draft:
        fam["draft"] = bench_draft(head, args)
    if family == "qwen2.5-vl" and not args.no_e2e:
        fam["e2e"] = bench_e2e(model, graph_lm if fused_lm is None else (gemv_lm if args.e2e_gemv else fused_lm), args)
    gc.collect()
    torch.cuda.empty_cache()


def bench_draft(target_head, args) -> dict:
    import transformers

    from vidspec.decoding.fast.lm import FastLM

    cfg = transformers.Qwen2Config(**dict(QWEN_TEXT, num_hidden_layers=1, rope_parameters=ROPE))
    cfg._attn_implementation = "sdpa"
    with torch.device("cuda"):
        draft = transformers.Qwen2ForCausalLM._from_config(cfg, dtype=torch.bfloat16).eval()
        small_head = torch.nn.Linear(cfg.hidden_size, 32768, bias=False, dtype=torch.bfloat16)
    # EAGLE-3-style reduced draft vocabulary: 32k target ids (random here; by frequency in practice),
    # the head's rows are the target head's rows of those ids, argmax is mapped back to target ids.
    keep = torch.randperm(cfg.vocab_size, device="cuda")[:32768].sort().values
    with torch.no_grad():
        small_head.weight.copy_(target_head.weight[keep])
    out = {"text_context": args.draft_context}
    variants = [("full_head", target_head, None, False), ("head32k", small_head, keep, False)]
    if not (args.no_compile or args.no_gemv):
        variants += [("full_head_gemv", target_head, None, True), ("head32k_gemv", small_head, keep, True)]
    for tag, head, ids, gemv in variants:
        try:
            flm = FastLM(draft.model, head, max_len=args.draft_context + 256, graphs=True,
                         compile=None if not args.no_compile else False, head_ids=ids, gemv=gemv)
            fill_cache(flm, args.draft_context)
            out[f"{tag}_step_ms"] = our_step_ms(flm, args.draft_context, 1, args.reps, host=False)
            out[f"{tag}_step_host_ms"] = our_step_ms(flm, args.draft_context, 1, args.reps, host=True)
            out[f"{tag}_weight_bytes"] = flm.weight_bytes()
        except Exception as e:
            if not gemv:
                raise
            out[f"{tag}_error"] = f"{type(e).__name__}: {e}"[:300]
            traceback.print_exc()
    out["hf_eager_step_ms"] = hf_eager_step_ms(draft.model, draft.lm_head, args.draft_context, 1, args.reps)
    return out


def bench_e2e(model, flm, args) -> dict:
    """Vision tower, LM prefill and decode for one long video on the Qwen2.5-VL shape."""
    from transformers import DynamicCache

    from vidspec.decoding.fast.vision import FastQwenVision
    from vidspec.decoding.models.base import _cache_kwarg

    frames, side = (16, 448) if args.quick else (64, 784)
    t, h = frames // 2, side // 14
    grid = torch.tensor([[t, h, h]], device="cuda")
    px = torch.randn(t * h * h, 3 * 2 * 14 * 14, device="cuda", dtype=torch.bfloat16)
    vis_tokens = t * h * h // 4
    prompt = vis_tokens + 64
    res: dict = {"frames": frames, "side_px": side, "visual_tokens": vis_tokens, "prompt_tokens": prompt,
                 "new_tokens": args.e2e_tokens}
    print(f"-- e2e: {vis_tokens} visual tokens", flush=True)
    eager_vis = FastQwenVision(model.model.visual, compile=False)
    eager_vis(px, grid)
    res["ours_vision_eager_s"] = min(time_wall(lambda: eager_vis(px, grid)) for _ in range(2))
    fast_vis = FastQwenVision(model.model.visual)
    t0 = time.perf_counter()
    fast_vis(px, grid)  # warm-up (plan + kernels; compiles once for every video size: dynamic shapes)
    res["ours_vision_warmup_s"] = time.perf_counter() - t0
    res["ours_vision_s"] = min(time_wall(lambda: fast_vis(px, grid)) for _ in range(2))
    ref = model.model.visual(px, grid_thw=grid).pooler_output
    ours = fast_vis(px, grid)
    res["vision_rel_err"] = float((ours.float() - ref.float()).abs().max() / ref.float().abs().max())
    res["hf_vision_s"] = time_wall(lambda: model.model.visual(px, grid_thw=grid))
    lm, head = model.model.language_model, model.lm_head
    emb = torch.randn(prompt, lm.config.hidden_size, device="cuda", dtype=torch.bfloat16) * 0.02
    pos = rope_pos(prompt)

    def hf_prefill():
        cache = DynamicCache(config=lm.config)
        o = lm(inputs_embeds=emb[None], position_ids=pos[:, None], use_cache=True, **{_cache_kwarg(lm): cache})
        head(o.last_hidden_state[:, -1:])
        return cache

    hf_prefill()
    res["hf_prefill_s"] = time_wall(hf_prefill)
    res["hf_decode_ms_per_token"] = hf_eager_step_ms(lm, head, prompt, 1, reps=8)
    res["hf_decode_s"] = res["hf_decode_ms_per_token"] * args.e2e_tokens / 1e3
    res["hf_decode_note"] = "per-token eager forward at this context (measured) x new tokens"
    if flm.max_len < prompt + args.e2e_tokens + 16:
        from vidspec.decoding.fast.lm import FastLM

        flm = FastLM(lm, head, max_len=prompt + args.e2e_tokens + 64, graphs=True, compile=flm.compiled)

    def our_prefill():
        flm.new_cache()
        for c in range(0, prompt, args.prefill_chunk):
            e = min(prompt, c + args.prefill_chunk)
            flm.prefill_chunk(emb[c:e], pos[:, c:e], c, want_hidden=False, last_logits=e == prompt)

    our_prefill()
    res["ours_prefill_s"] = time_wall(our_prefill)

    def our_decode():
        tok = 11
        for i in range(args.e2e_tokens):
            out = flm.step([tok], prompt + i, prompt + i, 0, [0], tril(1))
            tok = int(out.argmax[0])

    for s in range(prompt, prompt + args.e2e_tokens, flm.bucket):  # capture every bucket the decode crosses
        flm.step([11], s, s, 0, [0], tril(1))
    res["ours_decode_s"] = time_wall(our_decode)
    res["hf_total_s"] = res["hf_vision_s"] + res["hf_prefill_s"] + res["hf_decode_s"]
    res["ours_total_s"] = res["ours_vision_s"] + res["ours_prefill_s"] + res["ours_decode_s"]
    return res


def print_table(results: dict) -> None:
    bw = results["bandwidth_bytes_per_s"]
    print(f"\ncopy bandwidth {bw / 1e12:.2f} TB/s   ({results['machine']['gpu']}, torch {results['machine']['torch']}, "
          f"transformers {results['machine']['transformers']}, git {str(results['git']['sha'])[:10]})")
    cols = [("hf_generate_eager_ms", "HF gen eager"), ("hf_generate_static_ms", "HF gen static"),
            ("hf_eager_step1_ms", "HF fwd 1"), ("hf_eager_step9_ms", "HF fwd 9"),
            ("ours_graph_ar_ms", "our AR graph"), ("ours_fused_ar_ms", "our AR fused"),
            ("ours_fused_ar_loop_ms", "our AR loop"), ("ours_gemv_ar_ms", "our AR gemv"),
            ("ours_graph_verify9_ms", "our K=8 graph"), ("ours_fused_verify9_ms", "our K=8 fused"),
            ("ours_gemv_verify9_ms", "our K=8 gemv"), ("limit_ms", "limit"), ("limit_with_kv_ms", "limit+KV")]
    for fam, r in results["families"].items():
        print(f"\n{fam}: weights {r['weight_bytes'] / 1e9:.2f} GB, bandwidth limit {r['bandwidth_limit_ms']:.2f} ms/step")
        if r.get("gemv_mode") == "all":
            print('gemv columns: FastLM(gemv="all"), verify steps on the Triton (split-K) path too'
                  + (f" (table {results['gemv_table']['path']})" if "gemv_table" in results else " (built-in configs)"))
        print("ms/token".ljust(16) + "".join(c[1].rjust(15) for c in cols) + "   AR/limit  K8/limit")
        for ctx, row in r["contexts"].items():
            cells = "".join((f"{row[k]:.2f}" if isinstance(row.get(k), float) else "-").rjust(15) for k, _ in cols)
            print(f"ctx {ctx}".ljust(16) + cells + f"   {row['ar_vs_limit']:.2f}x    {row['verify9_vs_limit']:.2f}x")
        d = r.get("draft")
        if d:
            print(f"draft step (1 layer, text ctx {d['text_context']}): full head {d['full_head_step_ms']:.3f} ms "
                  f"(+host {d['full_head_step_host_ms']:.3f}), 32k head {d['head32k_step_ms']:.3f} ms, "
                  f"HF eager {d['hf_eager_step_ms']:.2f} ms  [target <= 0.3 ms; floor with full head "
                  f"{d['full_head_weight_bytes'] / bw * 1e3:.3f} ms]")
            if "head32k_gemv_step_ms" in d and "full_head_gemv_step_ms" in d:
                print(f"  with the Triton small-M products: full head {d['full_head_gemv_step_ms']:.3f} ms, "
                      f"32k head {d['head32k_gemv_step_ms']:.3f} ms")
        e = r.get("e2e")
        if e:
            print(f"end to end, {e['visual_tokens']} visual tokens, {e['new_tokens']} new tokens:")
            for who in ("hf", "ours"):
                print(f"  {who:5s} vision {e[who + '_vision_s']:.3f} s  prefill {e[who + '_prefill_s']:.3f} s  "
                      f"decode {e[who + '_decode_s']:.2f} s  total {e[who + '_total_s']:.2f} s")
            print(f"  vision rel err ours vs HF: {e['vision_rel_err']:.2e}; our vision without torch.compile "
                  f"{e['ours_vision_eager_s']:.3f} s, first compiled call {e['ours_vision_warmup_s']:.1f} s")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "benchmarks/results", help="output folder for engine_gpu.json")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2k context only, Qwen only, small video")
    ap.add_argument("--families", default="qwen2.5-vl,llava-ov", help="comma-separated: qwen2.5-vl, llava-ov")
    ap.add_argument("--contexts", default="2048,16384", help="comma-separated context lengths")
    ap.add_argument("--hf-static-contexts", default="2048", help="contexts for HF static-cache generate ('' = none)")
    ap.add_argument("--hf-static-all", action="store_true",
                    help="HF static-cache generate for every family (default: Qwen2.5-VL only; its compile is slow)")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile-fused variant")
    ap.add_argument("--no-e2e", action="store_true", help="skip the long-video end-to-end run")
    ap.add_argument("--no-gemv", action="store_true",
                    help="skip the variants with the Triton small-M weight products (FastLM gemv=True)")
    ap.add_argument("--e2e-gemv", action="store_true", help="decode the end-to-end run with gemv=True")
    ap.add_argument("--gemv-verify", action="store_true",
                    help='the gemv variant is FastLM(gemv="all"): verify steps (<= 16 tokens) take the Triton split-K '
                         "path too (kernels per VIDSPEC_GEMV_TABLE when set, else gemv.py's defaults)")
    ap.add_argument("--variants", default="graph,fused,gemv",
                    help="which of our step variants to time (comma-separated: graph, fused, gemv)")
    ap.add_argument("--skip-hf", action="store_true", help="skip the HF generate / eager-step baselines")
    ap.add_argument("--no-draft", action="store_true", help="skip the one-layer draft-step measurements")
    ap.add_argument("--reps", type=int, default=30, help="timed repetitions per step measurement")
    ap.add_argument("--prefill-chunk", type=int, default=32768,
                    help="LM prefill chunk of our path (FastTarget's default; 8192 measured 0.2 s slower at 25k on an H200)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("engine_gpu.py needs a CUDA device", file=sys.stderr)
        return 2
    args.contexts = [int(c) for c in args.contexts.split(",") if c]
    args.hf_static_contexts = {int(c) for c in args.hf_static_contexts.split(",") if c}
    families = [f for f in args.families.split(",") if f]
    args.variants = [v for v in args.variants.split(",") if v]
    if unknown := set(args.variants) - {"graph", "fused", "gemv"}:
        ap.error(f"unknown --variants {sorted(unknown)}")
    args.gen_tokens, args.loop_tokens, args.e2e_tokens = 32, 64, 512
    args.draft_context = 512
    if args.quick:
        args.contexts, args.hf_static_contexts, families = [2048], set(), ["qwen2.5-vl"]
        args.gen_tokens, args.loop_tokens, args.e2e_tokens, args.reps = 16, 32, 128, 10
    torch.backends.cuda.matmul.allow_tf32 = False
    t0 = time.perf_counter()
    results: dict = {"machine": machine_info("cuda"), "git": git_info(), "args": {k: (sorted(v) if isinstance(v, set) else v)
                                                         for k, v in vars(args).items()}}
    table_path = os.environ.get("VIDSPEC_GEMV_TABLE")
    if table_path:  # recorded beside the numbers it produced (FastLM validates it again at construction)
        results["gemv_table"] = {"path": table_path, "table": json.loads(Path(table_path).read_text())}
    results["bandwidth_bytes_per_s"] = bw = copy_bandwidth()
    results["families"] = {}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with torch.inference_mode():
        for fam in families:
            bench_family(fam, args, bw, results["families"])
            results["total_s"] = time.perf_counter() - t0
            (out / "engine_gpu.json").write_text(json.dumps(results, indent=2))  # partial results survive a timeout
    results["total_s"] = time.perf_counter() - t0
    (out / "engine_gpu.json").write_text(json.dumps(results, indent=2))
    print_table(results)
    print(f"\nwrote {out / 'engine_gpu.json'} in {results['total_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
