"""PROJECTION: each method's speedup at LVSpec's own Qwen pair (7B draft VLM, 32B target), from measured costs.

What it is: the per-round costs of a Qwen2.5-VL-7B-shaped draft VLM and a Qwen2.5-VL-32B-shaped target
(random bf16 weights drawn from the real configs; the costs do not depend on the weights' values), measured
through vidspec's fast engine (``FastLM`` CUDA-graph steps with the glue ``FastTarget`` adds, the greedy
device chain ``FastModelDrafter`` drafts with, ``FastQwenVision``, ``FastSparrowDrafter``), combined with the
acceptance that a trained testbed pair reached in a recorded ``vidspec eval`` run (``records.jsonl``; per-round
counts recovered by ``replay_7b.record_schedule``). It is not a 32B model's own acceptance: read every figure
as "what this engine gives at the paper's shapes when the draft accepts as the testbed's does".

Measured, at a ~25k-visual-token video (64 frames at 784 px) and a ~2k one (16 frames at 448 px), 64 text
tokens around the video:

- target (32B shape): vision tower on the frames, LM prefill, the AR step (T = 1), the verify step of
  T = K + 1 tokens for every K of ``--ks``;
- draft VLM (7B shape): its own vision tower and LM prefill of the same video (the draft-VLM methods pay
  them, Sparrow does not), and one round of greedy drafting, ``k`` tokens after 1 or 2 pending tokens
  (a step of the pending tokens, then ``k - 1`` chained single-token steps: ``greedy_chain_device``);
- Sparrow draft at the 32B width (one layer, text-only cache, the target's full head): ``propose(K)``
  after 1 and K + 1 pending tokens, and its prompt feed (``begin``).

Combined (formula ``FORMULA`` below, also written into the JSON): per recorded sample, round r accepts
``n_r`` of ``k_r`` drafts; method time = sum over rounds of draft(k_r, pending_r) + verify(k_r + 1);
AR time = (sum of n_r + 1) AR steps. DSR = sum AR / sum method (prefill excluded, as docs/algorithms.md
"Metrics"); end to end adds the target's vision + prefill to both sides and the draft VLM's own vision +
prefill (or Sparrow's prompt feed) to the method's, at the recorded lengths and at ``--new-tokens``.

Memory: the 32B target (~62 GiB of weights + ~6 GiB of KV at 25k) and the 7B draft (~15.5 GiB) do not fit
one 80 GB GPU together, so each model is measured in its own process (``--phase``), one after the other,
and the parent combines the parts. LLaVA-OneVision-72B (~136 GiB in bf16) fits no lent single GPU and is
left out.

Run on the GPU machine from the repository root (after ``source tools/gpu-machine/setup.sh``)::

    python benchmarks/pair_projection_gpu.py --records R1.jsonl.gz,R2.jsonl.gz --out "$OUT"   # ~6 min, H100
    python benchmarks/pair_projection_gpu.py --combine "$OUT" --records ... --out DIR   # re-project, no GPU
    python benchmarks/pair_projection_gpu.py --smoke --records ... --out runs/pp   # CPU, tiny shapes, seconds

Writes ``pair_projection_<gpu>.json`` (``pair_projection_smoke.json`` with ``--smoke``) with the cost table,
acceptance and projection per method, machine info and git SHA, and keeps the per-phase parts in
``pair_projection_parts/``.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import re
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_gpu as eg  # noqa: E402  (the 7B shapes)
import replay_7b as rp  # noqa: E402  (record_schedule, Glue)
import sparrow_draft_step_gpu as sds  # noqa: E402  (Sparrow pair builder, Case, machine info helpers)

from vidspec.evaluation.runner import git_info, machine_info  # noqa: E402

#: Qwen2.5-VL-32B-Instruct's text model (Qwen2.5-32B: 64 layers, 40 query / 8 KV heads).
QWEN32B_TEXT = dict(eg.QWEN_TEXT, hidden_size=5120, intermediate_size=27648, num_hidden_layers=64,
                    num_attention_heads=40, num_key_value_heads=8)
TEXT = {
    "7b": eg.QWEN_TEXT,
    "32b": QWEN32B_TEXT,
    "smoke-draft": dict(eg.QWEN_TEXT, vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2),
    "smoke-target": dict(eg.QWEN_TEXT, vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2),
}
SMOKE_VISION = dict(eg.QWEN_VISION, depth=2, hidden_size=32, intermediate_size=64, num_heads=2, fullatt_block_indexes=[1])
#: videos as (frames, side in px): 64 x 784 px -> 25,088 visual tokens; 16 x 448 px -> 2,048
VIDEOS = {"long": (64, 784), "short": (16, 448)}
SMOKE_VIDEOS = {"long": (4, 112), "short": (2, 112)}
TEXT_TOKENS = 64
PAPER = {"qwen2.5-vl-32b": {"speedup": 2.70, "retention_min": 0.998, "tau": 7.76, "tau_strict_sd": 3.28},
         "llava-onevision-72b": {"speedup": 2.94}}
FORMULA = ("per sample: method_s = sum_r [draft(k_r, pending_r) + verify(k_r + 1)], ar_s = (sum_r (n_r + 1)) * ar_step; "
           "DSR = sum(ar_s) / sum(method_s) over samples; DSR+feed adds the drafter's prompt-side start to method_s "
           "(Sparrow's prompt feed, begin; the draft VLM's own vision + LM prefill), at the recorded lengths and at N; "
           "ESR = sum(P_t + ar_s) / sum(P_t + P_d + method_s), P_t = target vision + LM prefill, P_d = the draft VLM's "
           "vision + LM prefill (0 for Sparrow, whose feed is counted instead); ESR@N scales both decodes to N new "
           "tokens at the same per-token cost. Draft VLM: draft(k, p) = a p-token step then k - 1 chained 1-token "
           "steps (measured for every K of the cost table, linear in k between); pending p = 2 after a round that "
           "accepted all k, else 1. Sparrow: draft(K, p) = propose(K) after p = n_prev + 1 pending tokens (linear "
           "in p between the measured 1 and K + 1; a short last round costs a full K, as the warmed-up chain runs). "
           "verify(T) is measured at every T = K + 1 of the cost table and T = 1 (AR); other T by linear "
           "interpolation. Records without their rounds listed give per-round counts through record_schedule "
           "(order not recorded), so pending counts follow the recovered order, unless the records list their rounds in order (then exact).")


# ---- timing ------------------------------------------------------------------------------------
def wall_ms(fn, dev: torch.device, reps: int, warmup: int = 2) -> float:
    """Median wall milliseconds of ``fn()`` (device synchronised on both sides; host work included)."""
    for _ in range(warmup):
        fn()
    sds.sync(dev)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sds.sync(dev)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def free(dev: torch.device) -> None:
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


# ---- models ------------------------------------------------------------------------------------
def build_vlm(shape: str, dev: torch.device, dtype: torch.dtype):
    """A Qwen2.5-VL of text shape ``shape`` (the 7B vision tower, its merger sized to the text width), random weights."""
    import transformers

    text = TEXT[shape]
    vision = dict(SMOKE_VISION if shape.startswith("smoke") else eg.QWEN_VISION, out_hidden_size=text["hidden_size"])
    half = text["hidden_size"] // text["num_attention_heads"] // 2
    sections = [half // 4, 3 * half // 8, half - half // 4 - 3 * half // 8]  # [16, 24, 24] at head dim 128
    cfg = transformers.Qwen2_5_VLConfig(text_config=dict(text, rope_parameters=dict(eg.ROPE, mrope_section=sections)),
                                        vision_config=vision, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(dev):
        model = transformers.Qwen2_5_VLForConditionalGeneration._from_config(cfg, dtype=dtype)
    return model.eval()


def video_inputs(frames: int, side: int, dev: torch.device, dtype: torch.dtype):
    """Random patches of a video: ``(pixels, grid_thw, visual tokens)`` (temporal patch 2, patch 14, merge 2)."""
    t, h = frames // 2, side // 14
    px = torch.randn(t * h * h, 3 * 2 * 14 * 14, device=dev, dtype=dtype)
    return px, torch.tensor([[t, h, h]], device=dev), t * h * h // 4


def rope3(n: int, dev: torch.device, start: int = 0) -> torch.Tensor:
    return torch.arange(start, start + n, device=dev)[None].expand(3, n)


def prefill(flm, emb: torch.Tensor, chunk: int) -> None:
    """The LM prefill as FastTarget runs it: chunks of ``chunk`` positions, logits of the last position only."""
    n = emb.shape[0]
    pos = rope3(n, emb.device)
    flm.new_cache()
    for c in range(0, n, chunk):
        e = min(n, c + chunk)
        flm.prefill_chunk(emb[c:e], pos[:, c:e], c, want_hidden=False, last_logits=e == n)


def draft_chain(flm, glue, start: int, pending: int, k: int) -> list[int]:
    """One greedy draft round as ``FastTarget.greedy_chain_device`` runs it (one host read at the end)."""
    out = flm.step([11] * pending, start, start, 0, list(range(pending)), glue.tril[pending])
    length = start + pending
    if not flm.graphs:
        toks = [int(out.argmax[-1])]
        for _ in range(k - 1):
            out = flm.step([toks[-1]], length, length, 0, [0], glue.tril[1])
            length += 1
            toks.append(int(out.argmax[-1]))
        return toks
    toks_dev = torch.empty(k, dtype=torch.long, device=flm.device)
    toks_dev[0:1].copy_(out.argmax[-1:])
    prev = pending
    for i in range(1, k):
        flm.set_chain_next(prev, out.argmax)
        out = flm.replay(1, flm._bucket(length + 1))
        toks_dev[i:i + 1].copy_(out.argmax[-1:])
        length += 1
        prev = 1
    return toks_dev.tolist()


def measure_vlm(role: str, args, dev: torch.device, dtype: torch.dtype) -> dict:
    """Vision, prefill and decode-round costs of one model (``role`` target or draft) at every video."""
    from vidspec.decoding.fast.lm import FastLM
    from vidspec.decoding.fast.vision import FastQwenVision

    shape = args.target_shape if role == "target" else args.draft_shape
    t0 = time.perf_counter()
    model = build_vlm(shape, dev, dtype)
    sds.sync(dev)
    res: dict = {"role": role, "shape": shape, "text_config": TEXT[shape], "build_s": time.perf_counter() - t0,
                 "params": sum(p.numel() for p in model.parameters()), "contexts": {}}
    print(f"== {role}: {shape}-shaped Qwen2.5-VL, {res['params'] / 1e9:.2f}B parameters, built in "
          f"{res['build_s']:.0f} s", flush=True)
    # The vision tower first, before the KV cache exists (its activations at 25k tokens are the peak).
    vis = FastQwenVision(model.model.visual)
    feats_dim = model.config.get_text_config().hidden_size
    for name, (frames, side) in args.videos.items():
        px, grid, n_vis = video_inputs(frames, side, dev, dtype)
        t1 = time.perf_counter()
        out = vis(px, grid)
        sds.sync(dev)
        row = res["contexts"].setdefault(name, {"frames": frames, "side_px": side, "visual_tokens": n_vis,
                                                "prompt_tokens": n_vis + TEXT_TOKENS})
        row["vision_first_call_s"] = time.perf_counter() - t1
        assert out.shape == (n_vis, feats_dim), out.shape
        row["vision_s"] = min(wall_ms(lambda px=px, grid=grid: vis(px, grid), dev, reps=1, warmup=0)
                              for _ in range(2)) / 1e3
        del px, out
        free(dev)
    longest = max(r["prompt_tokens"] for r in res["contexts"].values())
    kmax = max(args.ks)
    lm = model.model.language_model
    flm = FastLM(lm, model.lm_head, max_len=longest + 2 * kmax + 64, hidden_layers={"penult": len(lm.layers) - 1},
                 graphs=dev.type == "cuda")
    free(dev)  # the unfused q/k/v and gate/up storages FastLM replaced
    res["weight_bytes"] = flm.weight_bytes()
    res["fast_lm"] = {"graphs": flm.graphs, "compiled": flm.compiled, "kernels": flm.kernels, "fused": flm.fused}
    glue = rp.Glue(flm, dev)
    for name, row in sorted(res["contexts"].items(), key=lambda kv: kv[1]["prompt_tokens"]):
        ctx = row["prompt_tokens"]
        emb = torch.randn(ctx, flm.d, device=dev, dtype=dtype) * 0.02
        chunk = args.prefill_chunk
        try:
            prefill(flm, emb, chunk)
            fits = True
        except torch.cuda.OutOfMemoryError:  # the one-chunk prefill's activations do not fit beside the weights
            fits = False
        if not fits:  # (outside the handler: its traceback holds the failed chunk's tensors)
            free(dev)
            chunk = args.prefill_chunk_fallback
            prefill(flm, emb, chunk)
        row["prefill_chunk"] = chunk
        row["prefill_s"] = wall_ms(lambda emb=emb, chunk=chunk: prefill(flm, emb, chunk), dev, reps=args.prefill_reps, warmup=0) / 1e3
        del emb
        free(dev)
        print(f"-- {name}: {ctx} positions, vision {row['vision_s']:.3f} s, LM prefill {row['prefill_s']:.3f} s "
              f"(chunk {chunk})", flush=True)
        # The cache now holds ctx positions; every step below runs at slot ctx (re-running a step at the
        # same slot is idempotent, and its cost is the cost at that context).
        row["ar_step_ms"] = wall_ms(lambda ctx=ctx: glue.step([11], ctx), dev, args.reps)
        if role == "target":
            row["verify_ms"] = {}
            for k in args.ks:
                row["verify_ms"][str(k + 1)] = wall_ms(lambda k=k, ctx=ctx: glue.step([11] * (k + 1), ctx),
                                                              dev, args.reps)
            print(f"   AR {row['ar_step_ms']:.2f} ms, verify "
                  + ", ".join(f"T={t} {v:.2f}" for t, v in row["verify_ms"].items()) + " ms", flush=True)
        else:
            row["round_ms"] = {"1": {}, "2": {}}  # pending -> k -> ms
            for p in (1, 2):
                for k in sorted({1, *args.ks}):
                    row["round_ms"][str(p)][str(k)] = wall_ms(lambda p=p, k=k, ctx=ctx: draft_chain(flm, glue, ctx, p, k),
                                                             dev, args.reps)
            print(f"   own step {row['ar_step_ms']:.2f} ms, rounds after 1 pending: "
                  + ", ".join(f"k={k} {v:.2f}" for k, v in row["round_ms"]["1"].items()) + " ms", flush=True)
    if dev.type == "cuda":
        res["max_memory_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return res


def measure_sparrow(args, dev: torch.device, dtype: torch.dtype) -> dict:
    """Sparrow's ``propose(K)`` and prompt feed on a one-layer draft of the target's width (``sds``' pair builder)."""
    from vidspec.decoding.fast.sparrow_drafter import FastSparrowDrafter

    shape = "smoke" if args.smoke else "32b"
    sds.SHAPES.setdefault("32b", {k: QWEN32B_TEXT[k] for k in ("vocab_size", "hidden_size", "intermediate_size",
                                                               "num_attention_heads", "num_key_value_heads")})
    model, target, cfg, draft = sds.build_pair("qwen2.5-vl", shape, dev, dtype, layers=2)
    res: dict = {"shape": shape, "draft_params": sum(p.numel() for p in draft.parameters()),
                 "contexts": {}}
    print(f"== sparrow draft at the {shape} width", flush=True)
    for name, (frames, side) in args.videos.items():
        n_vis = (frames // 2) * (side // 14) ** 2 // 4
        state = sds.make_state(target, TEXT_TOKENS, n_vis, seed=n_vis)
        row: dict = {"visual_tokens": n_vis, "propose_ms": {}}
        for k in args.sparrow_ks:
            row["propose_ms"][str(k)] = {}
            for pending in (1, k + 1):
                drafter = FastSparrowDrafter(draft, max_len=args.sparrow_max_len)
                case = sds.Case(drafter, target, state, k, pending)
                for i in range(2 + args.reps):
                    case.round(record=i >= 2)
                row["propose_ms"][str(k)][str(pending)] = case.ms()
                if "begin_ms" not in row:
                    row["begin_ms"] = wall_ms(lambda d=drafter, s=state: d.begin(target, s, 11), dev, reps=3, warmup=1)
                del case, drafter
        res["contexts"][name] = row
        print(f"-- {name}: begin {row['begin_ms']:.2f} ms, propose "
              + ", ".join(f"K={k} {v['1']:.2f}/{v[str(int(k) + 1)]:.2f}" for k, v in row["propose_ms"].items())
              + " ms (1 / K+1 pending)", flush=True)
    del model, draft
    free(dev)
    return res


# ---- records -----------------------------------------------------------------------------------
def read_records(spec: str) -> tuple[str, list[dict]]:
    """``LABEL=PATH`` or ``PATH`` of a records.jsonl(.gz): its label and rows."""
    label, _, path = spec.rpartition("=")
    p = Path(path)
    raw = p.read_bytes()
    if p.suffix == ".gz":
        raw = gzip.decompress(raw)
    return label or p.name.split(".")[0], [json.loads(line) for line in raw.decode().splitlines() if line.strip()]


def group_label(r: dict) -> str:
    """How records of one method are told apart (a run may hold one method at several settings)."""
    return str(r.get("label") or r.get("variant") or r["method"])


def acceptance(rows: list[dict]) -> dict:
    """Per recorded sample, the rounds as (drafted k_r, accepted n_r), in order.

    Records that carry ``rounds`` (``[drafted, accepted, emitted]`` per target pass, written since the adaptive
    draft policy can change K within a request) give them exactly; older ones are recovered from
    ``acceptance_by_position`` by :func:`replay_7b.record_schedule` (fixed K, order unknown).
    """
    samples, bad = [], 0
    for r in rows:
        if r.get("rounds"):
            rounds = [(int(d), int(a)) for d, a, *_ in r["rounds"]]
            samples.append({"id": r["sample_id"], "k": max(int(r.get("k") or 0), *(d for d, _ in rounds)),
                            "rounds": rounds, "exact": True})
            continue
        ns = rp.record_schedule(r)
        if ns is None:
            bad += 1
            continue
        k = len(r.get("acceptance_by_position") or []) or int(r.get("k") or 0)
        rounds = len(ns)
        short = min(k, max(0, int(r["drafted"]) - (rounds - 1) * k))
        ks = [k] * (rounds - 1) + [short]
        samples.append({"id": r["sample_id"], "k": k, "rounds": list(zip(ks, ns)), "exact": False})
    return {"samples": samples, "unreadable": bad}


def retention(rows: list[dict], ar: dict[str, dict]) -> dict:
    """Mean score of the method / mean score of AR on the same samples (the fact judge's F1, or accuracy)."""
    pairs = [(r["score"], ar[r["sample_id"]]["score"]) for r in rows
             if r.get("score") is not None and r["sample_id"] in ar and ar[r["sample_id"]].get("score") is not None]
    if not pairs:
        return {"retention": None, "samples": 0}
    m, a = (sum(x) / len(pairs) for x in zip(*pairs))
    return {"retention": m / a if a else None, "score": m, "ar_score": a, "samples": len(pairs),
            "metric": rows[0].get("metric")}


# ---- projection --------------------------------------------------------------------------------
def lerp(table: dict[int, float], x: float) -> float:
    """Piecewise-linear interpolation in a {x: y} table (linear extrapolation past its ends)."""
    xs = sorted(table)
    if x in table:
        return table[x]
    if len(xs) == 1:
        return table[xs[0]]
    lo = max([v for v in xs if v < x], default=xs[0])
    hi = min([v for v in xs if v > x], default=xs[-1])
    if lo == hi:
        lo, hi = (xs[-2], xs[-1]) if x > xs[-1] else (xs[0], xs[1])
    return table[lo] + (table[hi] - table[lo]) * (x - lo) / (hi - lo)


def projector(costs: dict, ctx: str):
    """Cost functions at context ``ctx`` from the measured parts."""
    t, d, s = costs["target"]["contexts"][ctx], costs["draft"]["contexts"][ctx], costs.get("sparrow")
    verify = {1: t["ar_step_ms"], **{int(k): v for k, v in t["verify_ms"].items()}}
    vlm_round = {int(p): {int(k): v for k, v in by_k.items()} for p, by_k in d["round_ms"].items()}
    sp = (s or {}).get("contexts", {}).get(ctx)
    sparrow = None if sp is None else {int(k): {int(p): v for p, v in by_p.items()} for k, by_p in sp["propose_ms"].items()}

    def draft_cost(kind: str, k: int, pending: int, full_k: int) -> float:
        if k == 0:
            return 0.0
        if kind == "vlm":
            return lerp(vlm_round[min(pending, 2)], k)
        if sparrow is None:
            raise KeyError("no Sparrow costs measured")
        kk = full_k if full_k in sparrow else min(sparrow, key=lambda x: abs(x - full_k))
        by_p = sparrow[kk]
        lo, hi = by_p[1], by_p[kk + 1]
        cost = lo + (hi - lo) * (min(pending, kk + 1) - 1) / kk
        return cost * full_k / kk  # a K missing from the Sparrow table: scaled from the nearest measured K

    return {"verify": lambda n: lerp(verify, n), "draft": draft_cost, "ar": t["ar_step_ms"],
            "prefill_target_s": t["vision_s"] + t["prefill_s"], "prefill_draft_s": d["vision_s"] + d["prefill_s"],
            "sparrow_begin_s": None if sp is None else sp["begin_ms"] / 1e3}


def project(method: str, acc: dict, cost: dict, new_tokens: int, goal: float) -> dict:
    """The projected speedups of one method's recorded acceptance at one context (see FORMULA)."""
    kind = "sparrow" if method.startswith("sparrow") else "vlm"
    tot = {"ar": 0.0, "draft": 0.0, "verify": 0.0, "tokens": 0, "rounds": 0, "samples": 0}
    for smp in acc["samples"]:
        pending, prev_full = 1, False
        for k, n in smp["rounds"]:
            if kind == "vlm":
                pending = 2 if prev_full else 1
            tot["draft"] += cost["draft"](kind, k, pending, smp["k"])
            tot["verify"] += cost["verify"](k + 1)
            prev_full = k > 0 and n == k
            pending = n + 1
        toks = sum(n + 1 for _, n in smp["rounds"])
        tot["tokens"] += toks
        tot["rounds"] += len(smp["rounds"])
        tot["samples"] += 1
        tot["ar"] += toks * cost["ar"]
    if not tot["samples"]:
        return {"method": method, "samples": 0}
    method_ms = tot["draft"] + tot["verify"]
    n = tot["samples"]
    # The drafter's prompt-side start: Sparrow's prompt feed, or the draft VLM's own vision + LM prefill.
    feed_s = cost["sparrow_begin_s"] if kind == "sparrow" else cost["prefill_draft_s"]
    pre_d = feed_s
    pre_t = cost["prefill_target_s"]
    ks = sorted({s["k"] for s in acc["samples"]})
    exact = sum(s["exact"] for s in acc["samples"])
    row = {"method": method, "drafter": kind, "k": ks[0] if len(ks) == 1 else ks, "samples": n,
           "rounds": tot["rounds"], "rounds_in_order_samples": exact, "tokens": tot["tokens"],
           "tau": tot["tokens"] / tot["rounds"],
           "k_used": sorted({k for s in acc["samples"] for k, _ in s["rounds"]}),
           "ar_ms_per_token": cost["ar"], "method_ms_per_token": method_ms / tot["tokens"],
           "draft_ms_per_round": tot["draft"] / tot["rounds"], "verify_ms_per_round": tot["verify"] / tot["rounds"],
           "draft_share": tot["draft"] / method_ms,
           "dsr": tot["ar"] / method_ms,
           "dsr_with_feed": tot["ar"] / (method_ms + 1e3 * feed_s * n),
           "dsr_if_draft_free": tot["ar"] / tot["verify"],
           "esr_recorded_length": (n * pre_t + tot["ar"] / 1e3) / (n * (pre_t + pre_d) + method_ms / 1e3),
           "mean_new_tokens": tot["tokens"] / n + 1}
    ar_n = pre_t + new_tokens * cost["ar"] / 1e3
    row["esr_at_new_tokens"] = ar_n / (pre_t + pre_d + new_tokens * row["method_ms_per_token"] / 1e3)
    row["dsr_with_feed_at_new_tokens"] = new_tokens * cost["ar"] / (new_tokens * row["method_ms_per_token"] + 1e3 * feed_s)
    # What the goal needs at these costs: tau at the measured per-round cost, and the draft cost per round at
    # the measured tau (negative: even a free draft misses, so acceptance alone holds it back).
    per_round = method_ms / tot["rounds"]
    row["tau_for_goal"] = goal * per_round / cost["ar"]
    row["draft_ms_per_round_for_goal"] = row["tau"] * cost["ar"] / goal - row["verify_ms_per_round"]
    # The paper's mean accepted length at this method's measured round cost (None where K + 1 < that tau).
    paper_tau = PAPER["qwen2.5-vl-32b"]["tau"]
    row["dsr_at_paper_tau"] = (paper_tau * cost["ar"] / per_round if kind == "vlm" and max(ks) + 1 >= paper_tau
                               else None)
    # The goal's shortfall as a product of three losses (each > 1 costs that factor):
    # goal / ESR@N = (goal / DSR if draft free) x (DSR if draft free / DSR) x (DSR / ESR@N).
    row["shortfall"] = {"acceptance": goal / row["dsr_if_draft_free"], "draft_cost": row["dsr_if_draft_free"] / row["dsr"],
                        "prefill": row["dsr"] / row["esr_at_new_tokens"]}
    row["limited_by"] = limiting(row, goal, new_tokens)
    return row


def limiting(row: dict, goal: float, new_tokens: int) -> str:
    """Which factor keeps the projection under ``goal`` first: acceptance, draft cost, or prefill."""
    if row["dsr_if_draft_free"] < goal:
        return (f"acceptance: even a free draft gives {row['dsr_if_draft_free']:.2f}x < {goal:.2f}x (tau {row['tau']:.2f}; "
                f"tau {row['tau_for_goal']:.2f} needed at the measured round cost)")
    if row["dsr"] < goal:
        return (f"draft cost: {row['draft_share']:.0%} of the decode; {row['draft_ms_per_round']:.1f} ms per round "
                f"against {row['draft_ms_per_round_for_goal']:.1f} ms that would give {goal:.2f}x at tau {row['tau']:.2f}")
    if row["esr_at_new_tokens"] < goal:
        return (f"prefill: decode {row['dsr']:.2f}x, end to end {row['esr_at_new_tokens']:.2f}x at {new_tokens} new "
                "tokens (the draft's own prefill and the target's are paid before the first round)")
    return f"none: {row['dsr']:.2f}x decode, {row['esr_at_new_tokens']:.2f}x end to end"


def combine(costs: dict, args) -> dict:
    """The projection of every recorded (method, K) at every measured context."""
    out: dict = {"groups": [], "not_projected": []}
    for spec in args.records:
        label, rows = read_records(spec)
        benches = sorted({r.get("benchmark", "") for r in rows})
        for bench in benches:
            brows = [r for r in rows if r.get("benchmark", "") == bench]
            ar = {r["sample_id"]: r for r in brows if r["method"] == "ar"}
            keys = sorted({(group_label(r), int(r.get("k") or 0)) for r in brows if r["method"] != "ar"})
            for name, k in keys:
                grows = [r for r in brows if group_label(r) == name and int(r.get("k") or 0) == k]
                method = grows[0]["method"]
                if method.startswith("tree-") or "mcq" in bench:
                    out["not_projected"].append({"records": label, "benchmark": bench, "method": name, "k": k,
                                                 "why": "tree verification is not in the cost table" if
                                                 method.startswith("tree-") else "multiple-choice answers (1-2 tokens)"})
                    continue
                grows = [r for r in grows if r.get("target_passes")][: args.limit or None]
                acc = acceptance(grows)
                grp = {"records": label, "benchmark": bench, "label": name, "method": method, "k": k,
                       "retention": retention(grows, ar), "unreadable_records": acc["unreadable"], "projection": {}}
                ret = grp["retention"]["retention"]
                for ctx in costs["target"]["contexts"]:
                    try:
                        p = project(method, acc, projector(costs, ctx), args.new_tokens, args.goal)
                    except KeyError as e:
                        grp["projection"][ctx] = {"error": str(e)}
                        continue
                    # The goal is speed AND fidelity: the paper's speedup at its retention (on the testbed's records).
                    kept = ret is not None and ret >= args.retention_goal
                    p["meets_goal"] = bool(p.get("dsr", 0) >= args.goal and kept)
                    if p.get("samples") and not kept:
                        p["limited_by"] = (f"retention: {'-' if ret is None else f'{ret:.1%}'} < {args.retention_goal:.1%}"
                                           f" (speed: {p['limited_by']})")
                    grp["projection"][ctx] = p
                out["groups"].append(grp)
    # Independent of the records: the paper's mean accepted length (7.76) at the draft VLM's measured round costs,
    # per K of the cost table that can reach it (pending 2 after a round that accepted all: the usual case there).
    tau = PAPER["qwen2.5-vl-32b"]["tau"]
    out["paper_tau_at_measured_costs"] = {
        ctx: {str(k): tau * c["ar"] / (c["draft"]("vlm", k, 2, k) + c["verify"](k + 1)) for k in args.ks if k + 1 >= tau}
        for ctx, c in ((ctx, projector(costs, ctx)) for ctx in costs["target"]["contexts"])}
    return out


def show(res: dict) -> None:
    pair = res["pair"]
    print(f"\nPROJECTION at {pair['draft']} -> {pair['target']} (random weights, measured costs x testbed acceptance; "
          f"{res['machine'].get('gpu') or res['machine']['device']})")
    for ctx, t in res["costs"]["target"]["contexts"].items():
        d = res["costs"]["draft"]["contexts"][ctx]
        print(f"{ctx}: {t['prompt_tokens']} positions; target AR {t['ar_step_ms']:.2f} ms, prefill "
              f"{t['vision_s'] + t['prefill_s']:.2f} s; draft step {d['ar_step_ms']:.2f} ms, prefill "
              f"{d['vision_s'] + d['prefill_s']:.2f} s")
    print(f"{'records':<16} {'method':<20} {'K':>3} {'ctx':<6} {'tau':>5} {'DSR':>6} {'free':>6} {'ESR@N':>6} "
          f"{'retain':>7}  limited by")
    for g in res["projection"]["groups"]:
        for ctx, p in g["projection"].items():
            if "dsr" not in p:
                continue
            ret = g["retention"]["retention"]
            print(f"{g['records'][:16]:<16} {g['label'][:20]:<20} {g['k']:>3} {ctx:<6} {p['tau']:>5.2f} {p['dsr']:>5.2f}x "
                  f"{p['dsr_if_draft_free']:>5.2f}x {p['esr_at_new_tokens']:>5.2f}x "
                  f"{(f'{ret:.1%}' if ret is not None else '-'):>7}  {p['limited_by']}")


# ---- driver ------------------------------------------------------------------------------------
PHASES = ("draft", "target", "sparrow")


def run_phase(args) -> dict:
    dev = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    t0 = time.perf_counter()
    with torch.inference_mode():
        if args.phase == "sparrow":
            part = measure_sparrow(args, dev, dtype)
        else:
            part = measure_vlm(args.phase, args, dev, dtype)
    part["seconds"] = time.perf_counter() - t0
    part["machine"] = machine_info(str(dev))
    return part


def portable_args(args) -> dict:
    """The arguments as recorded in the result: absolute paths (machine folders) reduced to their file names."""
    def name(p: str | None) -> str | None:
        if p is None:
            return None
        label, eq, path = p.rpartition("=")
        return label + eq + (Path(path).name if Path(path).is_absolute() else path)

    out = {k: v for k, v in vars(args).items() if k != "videos"}
    out["records"] = [name(r) for r in args.records]
    out["combine"], out["out"] = name(args.combine), name(args.out)
    return out


def gpu_tag(machine: dict) -> str:
    m = re.search(r"\b([A-Za-z]\d{2,4})\b", machine.get("gpu") or "")
    return m.group(1).lower() if m else ("gpu" if machine.get("gpu") else "cpu")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", required=True,
                    help="comma-separated records.jsonl(.gz) of `vidspec eval` runs (optionally LABEL=PATH)")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny shapes, in one process (seconds)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--ks", default="4,6,8,12,15,16", help="K values of the cost table (verify T = K + 1)")
    ap.add_argument("--sparrow-ks", default="8,16", help="K values of Sparrow's propose(K) table ('' skips Sparrow)")
    ap.add_argument("--reps", type=int, default=20, help="timed repetitions per step")
    ap.add_argument("--prefill-reps", type=int, default=2)
    ap.add_argument("--prefill-chunk", type=int, default=32768, help="LM prefill chunk (FastTarget's default)")
    ap.add_argument("--prefill-chunk-fallback", type=int, default=8192, help="chunk when the first does not fit")
    ap.add_argument("--new-tokens", type=int, default=512, help="output length of the ESR@N column")
    ap.add_argument("--goal", type=float, default=PAPER["qwen2.5-vl-32b"]["speedup"], help="the speedup goal (DSR)")
    ap.add_argument("--retention-goal", type=float, default=PAPER["qwen2.5-vl-32b"]["retention_min"],
                    help="the retention the goal's speedup must keep")
    ap.add_argument("--limit", type=int, default=0, help="records per (method, K) (0 = all)")
    ap.add_argument("--phase", choices=PHASES, help="measure one model in this process and write its part")
    ap.add_argument("--combine", default=None,
                    help="project again, measuring nothing: a folder holding pair_projection_parts/, or an earlier "
                         "result JSON (its cost table)")
    args = ap.parse_args(argv)
    args.records = [s for s in args.records.split(",") if s]
    for spec in args.records:
        if not Path(spec.rpartition("=")[2]).is_file():
            print(f"pair_projection_gpu.py: no records file {spec.rpartition('=')[2]}", file=sys.stderr)
            return 2
    args.ks = sorted({int(k) for k in args.ks.split(",") if k})
    args.sparrow_ks = sorted({int(k) for k in args.sparrow_ks.split(",") if k})
    if not args.ks or min(args.ks) < 1 or max(args.ks) > 63:
        print("pair_projection_gpu.py: --ks needs values in 1..63", file=sys.stderr)
        return 2
    out = Path(args.out)
    parts = Path(args.combine or args.out) / "pair_projection_parts"
    if args.combine is None and not sds.pick_device(args, "pair_projection_gpu.py"):
        return 2
    if args.device is None:
        args.device = "cpu"
    args.dtype = args.dtype or ("bfloat16" if str(args.device).startswith("cuda") else "float32")
    args.draft_shape, args.target_shape = ("smoke-draft", "smoke-target") if args.smoke else ("7b", "32b")
    args.videos = SMOKE_VIDEOS if args.smoke else VIDEOS
    args.sparrow_max_len = 4 * TEXT_TOKENS + 2 * max(args.ks + args.sparrow_ks) + 256
    if args.smoke:
        args.reps, args.prefill_reps = 2, 1
    if args.phase:  # a child: one model, one part file
        part = run_phase(args)
        parts.mkdir(parents=True, exist_ok=True)
        (parts / f"{args.phase}.json").write_text(json.dumps(part, indent=2) + "\n")
        return 0
    t0 = time.perf_counter()
    phases = [p for p in PHASES if p != "sparrow" or args.sparrow_ks]
    if args.combine is None:
        for phase in phases:
            if args.smoke:  # small enough to share one process
                parts.mkdir(parents=True, exist_ok=True)
                (parts / f"{phase}.json").write_text(json.dumps(run_phase(argparse.Namespace(**{**vars(args), "phase": phase}))))
                continue
            child = [sys.executable, str(Path(__file__).resolve()), *(argv if argv is not None else sys.argv[1:]),
                     "--phase", phase]
            rc = subprocess.run(child).returncode
            if rc != 0 and phase != "sparrow":
                print(f"pair_projection_gpu.py: phase {phase} failed (exit {rc})", file=sys.stderr)
                return 1
    costs, measured_git = {}, None
    if args.combine and Path(args.combine).is_file():  # an earlier result: its cost table, and the commit it ran
        earlier = json.loads(Path(args.combine).read_text())
        costs, measured_git = earlier["costs"], earlier.get("measured_git") or earlier.get("git")
    for phase in [] if costs else phases:
        path = parts / f"{phase}.json"
        if path.is_file():
            costs[phase] = json.loads(path.read_text())
    if not {"draft", "target"} <= set(costs):
        print(f"pair_projection_gpu.py: no draft/target parts in {parts}", file=sys.stderr)
        return 1
    try:
        projection = combine(costs, args)
    except Exception:  # the measured parts stay on disk; a combine can be rerun with --combine
        traceback.print_exc()
        return 1
    machine = costs["target"].get("machine") or machine_info(str(args.device))
    res = {"projection_note": "PROJECTION, not a measurement of a 32B pair: costs measured at the real shapes with "
                              "random weights, acceptance replayed from testbed eval records",
           "pair": {"draft": "Qwen2.5-VL-7B shape", "target": "Qwen2.5-VL-32B shape", "draft_shape": args.draft_shape,
                    "target_shape": args.target_shape},
           "paper": PAPER, "goal_speedup": args.goal, "goal_retention": args.retention_goal, "formula": FORMULA, "new_tokens": args.new_tokens,
           "not_measured": {"llava-onevision-72b": "Qwen2-72B LM in bf16 is ~136 GiB of weights: no lent single GPU "
                                                  "holds it, and a layer-scaled estimate was not made"},
           "costs": costs, "projection": projection, "machine": machine, "git": git_info(),
           "measured_git": measured_git or git_info(),
           "args": portable_args(args), "videos": args.videos,
           "total_s": time.perf_counter() - t0}
    show(res)
    tag = "smoke" if args.smoke else gpu_tag(machine)
    sds.write_results(res, out, f"pair_projection_{tag}", smoke=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
