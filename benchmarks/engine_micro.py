"""Micro-benchmark of the fast decode step on the GPU: variants side by side, GEMM and attention pieces, profile.

Run from the repository root on the GPU machine::

    PYTHONPATH=packages/decoding/src:packages/draft_training/src:packages/evaluation/src \\
        python benchmarks/engine_micro.py --out "$OUT"

For the Qwen2.5-VL-7B-shaped language model (random bf16 weights; only cost is meaningful):

- ``gemm``: F.linear (cuBLAS) for every weight shape of a step at M = 1 and 9, as achieved GB/s
  (several weight copies rotated so L2 does not serve them);
- ``attn``: one layer's attention at 2k / 16k context, T = 1 / 9: SDPA with a float mask over the
  bucketed cache (the old path) vs the split-K Triton kernel;
- ``steps``: the AR step (T=1) and the K=8 verify step (T=9) as CUDA-graph replays at 2k and 16k
  for FastLM variants (weight fusion, Triton step kernels, torch.compile and its mode);
- ``draft``: a Sparrow-like one-layer draft step (text context 512) with the full LM head and with
  a 32k-row head (``head_ids``: EAGLE-3-style reduced vocabulary mapped back to target ids);
- ``profile``: torch.profiler top-10 kernels of the best AR variant's graph replay.

Writes ``engine_micro.json`` and ``engine_micro_profile.txt`` to ``--out``; prints a table.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_gpu import QWEN_TEXT, ROPE, build, copy_bandwidth, fill_cache, tril  # noqa: E402

from vidspec.evaluation.runner import git_info, machine_info  # noqa: E402

T0 = time.perf_counter()


def elapsed() -> float:
    return time.perf_counter() - T0


def graph_ms(fn, reps: int = 20, inner: int = 10) -> float:
    """Median ms of ``fn`` captured ``inner`` times in one CUDA graph (launch gaps as in our steps)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(inner):
            fn()
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / inner)
    return statistics.median(ts)


def replay_ms(flm, t: int, reps: int) -> float:
    lb = flm._bucket(flm.cache.length + t)
    for _ in range(3):
        flm.replay(t, lb)
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        flm.replay(t, lb)
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def bench_gemm(bw: float) -> dict:
    d, ff, v = QWEN_TEXT["hidden_size"], QWEN_TEXT["intermediate_size"], QWEN_TEXT["vocab_size"]
    shapes = {"qkv": (d + 2 * 512, d), "o": (d, d), "gate_up": (2 * ff, d), "down": (d, ff), "head": (v, d)}
    out = {}
    for name, (n, k) in shapes.items():
        copies = max(1, min(8, int(256e6 // (n * k * 2)) + 1))
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
        for m in (1, 9):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            it = iter(range(10**9))

            def fn(x=x, ws=ws, it=it, copies=copies):
                torch.nn.functional.linear(x, ws[next(it) % copies])

            ms = graph_ms(fn, inner=copies * max(1, 8 // copies))
            out[f"{name}_m{m}"] = {"ms": ms, "gbps": n * k * 2 / ms / 1e6, "floor_ms": n * k * 2 / bw * 1e3}
        del ws
        torch.cuda.empty_cache()
    return out


def bench_attn() -> dict:
    from vidspec.decoding.fast.kernels import decode_attention
    from vidspec.decoding.fast.lm import attend_step, step_mask

    hq, hkv, hd = 28, 4, 128
    out = {}
    for ctx in (2048, 16384):
        cap = ctx + 1024
        kc = torch.randn(cap, hkv, hd, device="cuda", dtype=torch.bfloat16)
        vc = torch.randn(cap, hkv, hd, device="cuda", dtype=torch.bfloat16)
        for t in (1, 9):
            q = torch.randn(t, hq, hd, device="cuda", dtype=torch.bfloat16)
            arena = torch.tensor([ctx, ctx, 0], device="cuda")
            tm = torch.zeros(t, 64, dtype=torch.bool, device="cuda")
            tm[:, :t] = tril(t).cuda()
            lb = -(-(ctx + t) // 256) * 256
            base = torch.tensor(ctx, device="cuda")

            def sdpa(t=t, lb=lb, base=base, tm=tm, q=q, kc=kc, vc=vc):
                m = step_mask(t, lb, base, tm, torch.bfloat16)
                rep = hq // hkv
                attend_step(q, kc[:lb], vc[:lb], m[None].expand(rep, t, lb).reshape(rep * t, lb), hd ** -0.5)

            def triton_attn(q=q, kc=kc, vc=vc, tm=tm, arena=arena):
                decode_attention(q, kc, vc, tm, arena, hd ** -0.5)

            out[f"ctx{ctx}_t{t}"] = {"sdpa_mask_ms": graph_ms(sdpa), "triton_splitk_ms": graph_ms(triton_attn),
                                     "kv_floor_ms": 2 * ctx * hkv * hd * 2 / 4.2e12 * 1e3}
    return out


VARIANTS = {
    "old_graph": dict(fuse=False, kernels=False, compile=False),
    "old_compiled": dict(fuse=False, kernels=False, compile=True),
    "fused_kernels": dict(fuse=True, kernels=True, compile=False),
    "fused_kernels_compiled": dict(fuse=True, kernels=True, compile=True),
    "fused_kernels_autotune": dict(fuse=True, kernels=True, compile=True, compile_mode="max-autotune-no-cudagraphs"),
}


def bench_steps(model, args, res: dict, bw: float) -> None:
    from vidspec.decoding.fast.lm import FastLM

    lm, head = model.model.language_model, model.lm_head
    steps = res.setdefault("steps", {})
    for name in args.variants:
        if elapsed() > args.budget_s:
            steps[name] = {"skipped": f"time budget ({elapsed():.0f} s)"}
            continue
        torch._dynamo.reset()
        t0 = time.perf_counter()
        try:
            flm = FastLM(lm, head, max_len=max(args.contexts) + 1024, graphs=True, **VARIANTS[name])
            row = {"weight_bytes": flm.weight_bytes()}
            for ctx in args.contexts:
                fill_cache(flm, ctx)
                for t in (1, 9):
                    flm.step([11] * t, ctx, ctx, 0, list(range(t)), tril(t))  # capture (and compile)
                    ms = replay_ms(flm, t, args.reps)
                    lim = flm.weight_bytes() / bw * 1e3
                    row[f"ctx{ctx}_t{t}_ms"] = ms
                    row[f"ctx{ctx}_t{t}_vs_limit"] = ms / lim
            row["setup_s"] = time.perf_counter() - t0
            steps[name] = row
            print(f"[{elapsed():.0f}s] {name}: " + ", ".join(f"{k}={v:.3f}" for k, v in row.items()
                                                             if k.endswith("_ms")), flush=True)
            if name == args.profile_variant:
                res["profile"] = profile_step(flm, args)
            del flm
        except Exception as e:  # keep the other variants
            steps[name] = {"error": f"{type(e).__name__}: {e}"[:500]}
            traceback.print_exc()
        gc.collect()
        torch.cuda.empty_cache()


def profile_step(flm, args) -> str:
    from torch.profiler import ProfilerActivity, profile

    ctx = args.contexts[0]
    fill_cache(flm, ctx)
    texts = []
    for t in (1, 9):
        flm.step([11] * t, ctx, ctx, 0, list(range(t)), tril(t))
        lb = flm._bucket(ctx + t)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            for _ in range(5):
                flm.replay(t, lb)
            torch.cuda.synchronize()
        texts.append(f"== T={t}, ctx {ctx}, 5 graph replays\n"
                     + prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=70))
    return "\n".join(texts)


def bench_draft(args, bw: float) -> dict:
    import transformers

    from vidspec.decoding.fast.lm import FastLM

    cfg = transformers.Qwen2Config(**dict(QWEN_TEXT, num_hidden_layers=1, rope_parameters=ROPE))
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("cuda"):
        draft = transformers.Qwen2ForCausalLM._from_config(cfg, dtype=torch.bfloat16).eval()
    keep = torch.randperm(cfg.vocab_size, device="cuda")[:32768].sort().values
    small = torch.nn.Linear(cfg.hidden_size, keep.numel(), bias=False, dtype=torch.bfloat16, device="cuda")
    with torch.no_grad():
        small.weight.copy_(draft.lm_head.weight[keep])
    out = {"text_context": args.draft_context}
    ctx = args.draft_context
    for vname, kw in [("old", dict(fuse=False, kernels=False, compile=True)),
                      ("fused_kernels_compiled", dict(fuse=True, kernels=True, compile=True)),
                      ("fused_kernels", dict(fuse=True, kernels=True, compile=False))]:
        for hname, head, ids in [("full_head", draft.lm_head, None), ("head32k", small, keep)]:
            key = f"{vname}_{hname}"
            try:
                torch._dynamo.reset()
                flm = FastLM(draft.model, head, max_len=ctx + 256, graphs=True, head_ids=ids, **kw)
                fill_cache(flm, ctx)
                flm.step([11], ctx, ctx, 0, [0], tril(1))
                out[key + "_ms"] = replay_ms(flm, 1, args.reps)
                out[key + "_floor_ms"] = flm.weight_bytes() / bw * 1e3
                print(f"[{elapsed():.0f}s] draft {key}: {out[key + '_ms']:.3f} ms "
                      f"(floor {out[key + '_floor_ms']:.3f})", flush=True)
            except Exception as e:
                out[key + "_error"] = f"{type(e).__name__}: {e}"[:500]
                traceback.print_exc()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--contexts", default="2048,16384")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--profile-variant", default="fused_kernels_compiled")
    ap.add_argument("--sections", default="gemm,attn,steps,draft")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--budget-s", type=float, default=240.0, help="skip remaining step variants after this")
    args = ap.parse_args(argv)
    args.contexts = [int(c) for c in args.contexts.split(",") if c]
    args.variants = [v for v in args.variants.split(",") if v]
    args.draft_context = 512
    sections = set(args.sections.split(","))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    res: dict = {"machine": machine_info("cuda"), "git": git_info()}
    res["bandwidth_bytes_per_s"] = bw = copy_bandwidth()
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s", flush=True)

    def save():
        (out / "engine_micro.json").write_text(json.dumps(res, indent=2))

    with torch.inference_mode():
        if "gemm" in sections:
            res["gemm"] = bench_gemm(bw)
            save()
            for k, v in res["gemm"].items():
                print(f"gemm {k:12s} {v['ms']:.4f} ms  {v['gbps']:.0f} GB/s  (floor {v['floor_ms']:.4f})", flush=True)
        if "attn" in sections:
            res["attn"] = bench_attn()
            from vidspec.decoding.fast import kernels

            res["attn_tuned_configs"] = {str(k): str(v) for k, v in kernels._attn_split_tuned.cache.items()}
            print("tuned split-kernel configs:", res["attn_tuned_configs"], flush=True)
            save()
            for k, v in res["attn"].items():
                print(f"attn {k:12s} sdpa+mask {v['sdpa_mask_ms']:.4f} ms  triton {v['triton_splitk_ms']:.4f} ms",
                      flush=True)
        if "draft" in sections:
            res["draft"] = bench_draft(args, bw)
            save()
        if "steps" in sections:
            model = build("qwen2.5-vl")
            bench_steps(model, args, res, bw)
            save()
    if "profile" in res:
        (out / "engine_micro_profile.txt").write_text(res["profile"])
        print(res["profile"])
    lim = None
    print("\nvariant".ljust(28) + "".join(f"ctx{c}_t{t}".rjust(14) for c in args.contexts for t in (1, 9)))
    for name, row in res.get("steps", {}).items():
        lim = lim or (row.get("weight_bytes", 0) / bw * 1e3)
        cells = "".join((f"{row[f'ctx{c}_t{t}_ms']:.3f}" if f"ctx{c}_t{t}_ms" in row else "-").rjust(14)
                        for c in args.contexts for t in (1, 9))
        print(name.ljust(28) + cells)
    if lim:
        print(f"bandwidth limit {lim:.3f} ms (AR target {1.25 * lim:.2f}, K=8 target {1.4 * lim:.2f})")
    for k, v in res.get("draft", {}).items():
        if k.endswith("_ms") and not k.endswith("floor_ms"):
            print(f"draft {k}: {v:.3f} ms")
    print(f"done in {elapsed():.0f} s")
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
