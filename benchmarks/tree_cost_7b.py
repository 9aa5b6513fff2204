"""Would a Sparrow tree pay at 7B shapes? The round's pieces measured, combined with the testbed's τ.

On the SynthVid testbed a Sparrow tree (total 48, depth 8, top_k 8) raises τ from 3.66 (chain K = 4)
to 5.74, losslessly (``benchmarks/sparrow_tree_cpu.py``). Whether that is faster depends on what a
round costs: a verify pass over 49 tree nodes instead of 5 chain tokens, and eight draft levels
instead of four steps. This benchmark measures those costs on one random 7B-shaped target (Qwen2.5-VL
or LLaVA-OneVision text shapes, bf16, the real code paths) and projects the decode speedup:

- **AR and verify steps**: ``FastLM.step`` (CUDA graphs, the glue ``FastTarget`` adds: output
  clones and the accept read-back, ``replay_7b.Glue``) for 1 token, chains of K + 1 tokens, and
  tree-masked steps over each tree's ``total + 1`` nodes (its real shape, grown by the draft);
- **chain drafting**: ``FastSparrowDrafter.propose(K)`` (the graph-captured kernel path);
- **tree drafting**: ``TreeSparrowDrafter.propose_tree`` (eager PyTorch) and
  ``FastTreeSparrowDrafter.propose_tree`` (the tree grown on the device, one CUDA graph per round),
  beside an estimate from the chain: ``depth`` x the fast chain's cost per step.

Projected DSR = τ x AR ms per token / (draft ms + verify ms) per round, with τ from the testbed
(``--tau``: a ``sparrow_tree_cpu.json``). Python glue between the pieces is not in it (on the testbed
it was ~0.3 ms per round, RESULTS section 11.2), so read the figures as upper bounds of what this
engine gives with the testbed's acceptance. Random weights: costs only.

Run on the GPU machine from the repository root::

    PYTHONPATH=packages/decoding/src python benchmarks/tree_cost_7b.py --out "$OUT"      # ~3 min
    python benchmarks/tree_cost_7b.py --smoke --out /tmp/t                                 # CPU, seconds

Prints a table and writes ``tree_cost_7b.json`` (``tree_cost_7b_smoke.json``) with machine info.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import replay_7b  # noqa: E402  (Glue: what FastTarget adds around a FastLM step)
import sparrow_draft_step_gpu as sds  # noqa: E402  (shapes, bench target, machine info)


def parse_tree(spec: str) -> tuple[int, int, int]:
    """``48-8-8`` -> (total, depth, top_k)."""
    try:
        total, depth, top_k = (int(x) for x in spec.split("-"))
    except ValueError:
        raise SystemExit(f"bad tree {spec!r}: use TOTAL-DEPTH-TOPK, e.g. 48-8-8") from None
    if min(total, depth, top_k) < 1:
        raise SystemExit(f"bad tree {spec!r}: every number must be >= 1")
    return total, depth, top_k


def median_ms(fn, reps: int, warmup: int, dev: torch.device) -> float:
    times = []
    for i in range(warmup + reps):
        sds.sync(dev)
        t0 = time.perf_counter()
        fn()
        sds.sync(dev)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def taus(path: str) -> dict[str, float]:
    """Testbed τ by decoder name ("chain K=4", "tree 48-8-8", ...) from a sparrow_tree_cpu.json."""
    p = Path(path)
    if not p.is_file():
        raise SystemExit(f"--tau {path}: not found (run benchmarks/sparrow_tree_cpu.py first)")
    return {name: r["tau"] for name, r in json.loads(p.read_text())["results"].items()}


def measure(args, family: str, tau: dict[str, float], dev: torch.device, dtype: torch.dtype) -> tuple[dict, list[dict]]:
    """One family: the pieces' costs and the projected rows."""
    from vidspec.decoding.fast.lm import FastLM
    from vidspec.decoding.fast.sparrow import FastSparrowDrafter
    from vidspec.decoding.fast.tree import tree_mask_and_depth
    from vidspec.decoding.fast.tree_sparrow import TreeSparrowDrafter
    from vidspec.decoding.fast.tree_sparrow_fast import FastTreeSparrowDrafter

    print(f"== {family}: {args.shape}-shaped target, {args.layers} layers ({args.dtype}, {dev})", flush=True)
    model, target, cfg, draft = sds.build_pair(family, args.shape, dev, dtype, layers=args.layers)
    head_ids = sds.draft_vocabulary(cfg.vocab_size, args.draft_vocab)
    state = sds.make_state(target, args.text, args.visual, seed=args.visual)
    L = int(state.prompt_ids.shape[0])
    biggest = max([k + 1 for k in args.chains] + [t + 1 for t, _, _ in args.trees])
    flm = FastLM(model.model.language_model, model.lm_head, max_len=L + 256, max_tree=max(64, biggest),
                 max_step=max(64, biggest), hidden_layers={"penult": args.layers - 1}, graphs=dev.type == "cuda")
    glue = replay_7b.Glue(flm, dev)
    flm.new_cache()
    emb = torch.randn(L, flm.d, device=dev, dtype=dtype) * 0.02
    flm.prefill_chunk(emb, torch.arange(L, device=dev)[None].expand(3, L), 0, want_hidden=False, last_logits=False)

    def step_ms(tokens, depth=None, mask=None):
        return median_ms(lambda: glue.step(tokens, L, depth, mask), args.reps, args.warmup, dev)

    ar_ms = step_ms([11])
    costs: dict = {"family": family, "ar_ms": ar_ms, "chain": {}, "tree": {}}
    fast = FastSparrowDrafter(draft, max_len=args.text + 512, head_ids=head_ids)
    for k in args.chains:
        case = sds.Case(fast, target, state, k, pending=1)
        draft_ms = median_ms(lambda case=case: case.round(False), args.reps, args.warmup, dev)
        costs["chain"][k] = {"draft_ms": draft_ms, "verify_ms": step_ms([11] * (k + 1)), "step_ms": draft_ms / k}
    tree_d = TreeSparrowDrafter(draft, head_ids=head_ids)
    tree_case = sds.Case(tree_d.chain, target, state, 1, pending=1)
    fast_tree = FastTreeSparrowDrafter(draft, head_ids=head_ids, max_len=args.text + 512)
    fast_case = sds.Case(fast_tree.chain, target, state, 1, pending=1)
    per_step = min(c["step_ms"] for c in costs["chain"].values())

    def grow(drafter, case, total: int, depth: int, top_k: int):
        case.reset()
        return drafter.propose_tree(depth, top_k, total)

    for total, depth, top_k in args.trees:
        shape = (total, depth, top_k)
        tokens, parents = grow(tree_d, tree_case, *shape).with_root(11)
        mask, depths = tree_mask_and_depth(parents)
        eager_ms = median_ms(lambda sh=shape: grow(tree_d, tree_case, *sh), max(3, args.reps // 5), 1, dev)
        fast_ms = median_ms(lambda sh=shape: grow(fast_tree, fast_case, *sh), args.reps, args.warmup, dev)
        costs["tree"][f"{total}-{depth}-{top_k}"] = {
            "nodes": len(tokens), "eager_draft_ms": eager_ms, "fast_draft_ms": fast_ms,
            "graph_draft_ms_estimate": depth * per_step, "verify_ms": step_ms(tokens, depths, mask)}

    rows: list[dict] = []

    def row(decoder: str, tau_key: str, draft_ms: float, verify_ms: float, note: str) -> None:
        t = tau.get(tau_key)
        r = {"family": family, "decoder": decoder, "tau_testbed": t, "draft_ms": draft_ms, "verify_ms": verify_ms,
             "ar_ms": ar_ms, "dsr_projected": (t * ar_ms / (draft_ms + verify_ms)) if t else None, "note": note}
        rows.append(r)
        print(f"  {decoder:<32} τ {t if t else float('nan'):.2f}  draft {draft_ms:7.3f} ms  verify {verify_ms:6.3f} ms"
              f"  -> DSR {r['dsr_projected'] or float('nan'):.2f}x ({note})", flush=True)

    print(f"  AR step {ar_ms:.3f} ms", flush=True)
    for k, c in costs["chain"].items():
        row(f"chain K={k}", f"chain K={k}", c["draft_ms"], c["verify_ms"], "measured")
    for name, c in costs["tree"].items():
        row(f"tree {name} (eager draft)", f"tree {name}", c["eager_draft_ms"], c["verify_ms"], "measured")
        row(f"tree {name} (fast draft)", f"tree {name}", c["fast_draft_ms"], c["verify_ms"], "measured")
        row(f"tree {name} (depth x chain step)", f"tree {name}", c["graph_draft_ms_estimate"], c["verify_ms"],
            "draft estimated")
    return costs, rows


def run(args) -> dict:
    dev = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    tau = taus(args.tau)
    res: dict = {"rows": [], "costs": []}
    for family in args.families:
        costs, rows = measure(args, family, tau, dev, dtype)
        res["costs"].append(costs)
        res["rows"].extend(rows)
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tau", default="benchmarks/results/sparrow_tree_cpu/sparrow_tree_cpu.json",
                    help="testbed τ per decoder (benchmarks/sparrow_tree_cpu.py's JSON)")
    ap.add_argument("--trees", default="48-8-8,30-8-4,30-6-8", help="TOTAL-DEPTH-TOPK list")
    ap.add_argument("--chains", default="4,6,8", help="chain K list")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny shapes (seconds)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--shape", default=None, choices=sorted(sds.SHAPES))
    ap.add_argument("--layers", type=int, default=None, help="target layers (default 28, the 7B depth)")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--families", default="qwen2.5-vl")
    ap.add_argument("--visual", type=int, default=1024, help="visual tokens in the prompt")
    ap.add_argument("--text", type=int, default=64, help="text tokens in the prompt")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--draft-vocab", type=int, default=0,
                    help="reduced draft head of this many token ids (costs only; 0 = the full vocabulary)")
    args = ap.parse_args(argv)
    if not sds.pick_device(args, "tree_cost_7b.py"):
        return 2
    if args.smoke:
        args.shape, args.layers, args.visual, args.text, args.reps = args.shape or "smoke", args.layers or 2, 32, 16, 3
    args.shape = args.shape or "7b"
    args.layers = args.layers or 28
    args.dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    args.trees = [parse_tree(t) for t in args.trees.split(",") if t]
    args.chains = [int(k) for k in args.chains.split(",") if k]
    args.families = [f for f in args.families.split(",") if f]
    conventions = ("median ms per piece; projected DSR = testbed tau x AR ms / (draft ms + verify ms) per round, "
                   "no inter-piece glue (an upper bound); random weights: costs only")
    return sds.run_and_write(args, run, "tree_cost_7b", conventions=conventions)


if __name__ == "__main__":
    sys.exit(main())
