"""Where a speculative round's time goes: each CUDA graph's GPU time next to the host time around it.

A fast-engine round is a handful of graph replays (the draft chain or tree growth, a tree's post
graph, the target's verify step) and host work between them (input copies, the read-back, the
verifier, commits). ``round_profile_gpu.py`` gives the engine's own draft/verify split and
profiler tables; this script separates the two kinds of time without a profiler:

1. **Graph costs.** After the warm-up decodes and the eval runner's graph capture, every captured
   graph (the target's step graphs, the Sparrow chain graphs, a tree drafter's growth and post
   graphs) is replayed on its own and timed three ways:

   - ``gpu_ms``: the GPU's execution time. The replay is queued behind a ~1 ms sleep kernel, so its
     launch is over before the GPU reaches it; CUDA events around it then time the kernels alone.
   - ``launch_ms``: host time of the ``replay()`` call, with the GPU idle before it.
   - ``latency_ms``: replay and synchronise, from an idle GPU.
2. **Instrumented decodes.** The samples are decoded again with host timers around the methods a
   round calls. The timers are inclusive: an outer method's time includes the ones it calls.
   ``draft_tokens``/``verify_tree_device`` hold the round's one wait for the GPU. The step keys a
   round replays are counted, so the round's expected GPU time is the sum of the graphs' ``gpu_ms``;
   ``round_ms`` minus that is time the GPU spent waiting for the host.
3. **Clean decodes.** Every decoder decodes every sample with no timers (alternating per
   sample), for τ, ms per token, DSR over AR and the begin time.

Run on the GPU machine from the repository root (vidspec importable)::

    python benchmarks/round_anatomy_gpu.py --target data/releases/synthvid-target \\
        --sparrow data/releases/sparrow-synthvid --data DATA_DIR --k 4,8 --trees 48-8-8 --out "$OUT"

Writes ``round_anatomy.json`` (with machine info and the commit) to ``--out`` and prints the tables.
CUDA only (the graph costs need graphs); ``--device cpu`` exits with status 2.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from testbed_common import add_round_args, round_decoders, warm_up  # noqa: E402


class HostTimers:
    """Inclusive host-time accumulators around methods of live objects (undone by :meth:`restore`)."""

    def __init__(self):
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.calls: dict[str, int] = collections.defaultdict(int)
        self.keys: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self._undo: list = []

    def wrap(self, obj, name: str, label: str, key=None) -> None:
        """Time ``obj.name``; ``key(args)`` (optional) names what the call ran, counted per label."""
        if obj is None or not callable(getattr(obj, name, None)):
            return
        had = name in vars(obj)  # an instance's own attribute, a class's or a module's function
        old = vars(obj).get(name)
        fn = getattr(obj, name)

        def timed(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.seconds[label] += time.perf_counter() - t0
                self.calls[label] += 1
                if key is not None:
                    self.keys[label][key(a)] += 1

        setattr(obj, name, timed)  # on a class, ``timed`` receives ``self`` first, as ``fn`` does
        self._undo.append((obj, name, had, old))

    def restore(self) -> None:
        for obj, name, had, old in reversed(self._undo):
            if had:
                setattr(obj, name, old)
            else:
                delattr(obj, name)
        self._undo = []

    def table(self, rounds: int, requests: int) -> dict[str, dict]:
        per = {}
        for label, s in self.seconds.items():
            per[label] = {"calls": self.calls[label], "ms_per_round": 1e3 * s / max(1, rounds),
                          "ms_per_request": 1e3 * s / max(1, requests), "us_per_call": 1e6 * s / self.calls[label]}
            if self.keys.get(label):
                per[label]["keys"] = {str(k): n for k, n in sorted(self.keys[label].items())}
        return per


def graph_cost(graph, device, reps: int = 20) -> dict[str, float]:
    """GPU time (behind a sleep kernel), launch host time and idle-GPU latency of one graph, medians in ms."""
    gpu, launch, lat = [], [], []
    for _ in range(reps):
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        graph.replay()
        t1 = time.perf_counter()
        torch.cuda.synchronize(device)
        t2 = time.perf_counter()
        launch.append(t1 - t0)
        lat.append(t2 - t0)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(2_000_000)  # ~1 ms of GPU time: the launch below finishes before the GPU gets there
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        gpu.append(a.elapsed_time(b) / 1e3)
    return {"gpu_ms": 1e3 * statistics.median(gpu), "launch_ms": 1e3 * statistics.median(launch),
            "latency_ms": 1e3 * statistics.median(lat)}


def inventory(dec) -> dict[str, object]:
    """Every captured CUDA graph a decoder can replay, by a readable name."""
    g = {}
    lm = dec.target.lm
    # keys (T, lb, loose rule or None); the kernel path has lb = max_len
    for (t, lb, rule), gr in sorted(lm._graphs.items(), key=lambda kv: (kv[0][0], kv[0][1], -1 if kv[0][2] is None else kv[0][2])):
        g[f"target T={t}" + (f" lb={lb}" if lb != lm.max_len else "") + (f" loose rule {rule}" if rule is not None else "")] = gr.graph
    d = dec.drafter
    chain = getattr(d, "chain", d)
    eng = getattr(chain, "_eng", None)
    if eng is not None:
        for (t, k, lb), gr in sorted(eng.graphs.items()):
            g[f"draft chain T={t} k={k}" + (f" lb={lb}" if lb else "")] = gr.graph
    for (t, depth, top_k, lb), gr in sorted(getattr(d, "_graphs", {}).items()):
        g[f"tree growth T={t} depth={depth} top_k={top_k}" + (f" lb={lb}" if lb else "")] = gr.graph
    for (depth, top_k, total), (graph, _) in sorted(getattr(d, "_post_graphs", {}).items()):
        g[f"tree post depth={depth} top_k={top_k} total={total}"] = graph
    return g


def instrument(dec, timers: HostTimers) -> None:
    """Host timers around the calls of a round (and of a request's begin)."""
    from vidspec.decoding.fast import target as fast_target
    from vidspec.decoding.fast import tree as fast_tree

    tgt, d = dec.target, dec.drafter
    chain = getattr(d, "chain", d)
    timers.wrap(tgt, "prefill", "target.prefill")
    timers.wrap(tgt, "verify_device", "target.verify_device")
    timers.wrap(tgt, "verify_tree_device", "target.verify_tree_device (incl. the wait)")
    timers.wrap(tgt, "verify", "target.verify")
    timers.wrap(tgt, "rollback", "target.rollback")
    timers.wrap(tgt, "commit_tree", "target.commit_tree")
    timers.wrap(tgt, "_output", "target._output (clones, read-back copies)")
    timers.wrap(tgt.lm, "step", "lm.step (inputs + launch)")
    timers.wrap(tgt.lm, "replay", "lm.replay (graph launch)", key=lambda a: f"T={a[0]}")
    timers.wrap(fast_target.FastVerifyOutput, "draft_tokens", "read-back: draft_tokens (incl. the wait)")
    timers.wrap(fast_target.FastVerifyOutput, "greedy", "read-back: greedy")
    timers.wrap(dec.verifier, "verify", "verifier.verify")
    timers.wrap(d, "prepare", "drafter.prepare (in the prefill)")
    timers.wrap(d, "begin", "drafter.begin")
    timers.wrap(d, "propose_device", "drafter.propose_device")
    timers.wrap(d, "propose_tree_device", "drafter.propose_tree_device")
    timers.wrap(d, "propose", "drafter.propose")
    timers.wrap(d, "commit", "drafter.commit")
    timers.wrap(chain, "_prepare_model", "drafter._prepare_model (prepare)")
    timers.wrap(chain, "_engine", "drafter._engine (prepare, rounds)")
    timers.wrap(chain, "_start_prompt", "drafter._start_prompt")
    timers.wrap(chain, "_prefill", "drafter._prefill (eager prompt feed)")
    timers.wrap(chain, "_feed_graphs", "drafter._feed_graphs (prompt feed, graphs)")
    timers.wrap(chain, "_load", "drafter._load (inputs)")
    timers.wrap(chain, "_run", "drafter._run (chain launch)", key=lambda a: f"T={a[0]} k={a[2] if len(a) > 2 else 1}")
    timers.wrap(d, "_post", "tree._post")
    timers.wrap(fast_tree, "best_path", "tree.best_path")


def profile_prepare(dec, samples, n: int) -> dict:
    """cProfile of ``n`` calls of the drafter's ``prepare`` alone (each after its sample's prefill, device
    synchronised before and after): the functions with the most own time, and the mean ms per call."""
    import cProfile
    import io
    import pstats

    from vidspec.decoding.types import Request

    tgt, d = dec.target, dec.drafter
    sync = torch.cuda.synchronize if tgt.device.type == "cuda" else (lambda: None)
    prof = cProfile.Profile()
    wall = 0.0
    for i in range(n):
        s = samples[i % len(samples)]
        state = tgt.prefill(Request(prompt=s.prompt, clip=tgt.read_video(s.video_path)), frozenset(d.need))
        sync()
        t0 = time.perf_counter()
        prof.enable()
        d.prepare(tgt, state)
        prof.disable()
        sync()
        wall += time.perf_counter() - t0
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(30)
    text = buf.getvalue()
    print(f"\nprepare of {type(d).__name__}: {1e3 * wall / n:.3f} ms per call (profiled, synchronised), "
          f"{n} calls; top functions by own time:\n{text[text.find('ncalls'):]}")
    return {"calls": n, "ms_per_call_profiled": 1e3 * wall / n, "top_by_tottime": text}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_round_args(ap, limit=12, k="4,8", out="benchmarks/results/round_anatomy")
    ap.add_argument("--profile-prepare", type=int, default=0,
                    help="also cProfile this many calls of the first Sparrow decoder's prepare (0: no)")
    args = ap.parse_args(argv)
    if not args.device.startswith("cuda") or not torch.cuda.is_available():
        print("round_anatomy_gpu.py times CUDA graphs: it needs --device cuda on a machine with a GPU", file=sys.stderr)
        return 2

    from vidspec.evaluation.benchmarks.registry import load_benchmark
    from vidspec.evaluation.runner import decode_sample, git_info, machine_info

    samples = load_benchmark("synthvid_captions", args.data, split=args.split, limit=args.limit + 1)
    if len(samples) < 2:
        print(f"need at least 2 samples in {args.data} ({args.split}), got {len(samples)}", file=sys.stderr)
        return 2
    ks = [int(k) for k in args.k.split(",") if k.strip()]
    trees = [t.strip() for t in args.trees.split(",") if t.strip()]
    decs = round_decoders(args.target, args.sparrow, args.device, ks, trees)
    dev = decs["ar"].target.device
    n_new = args.max_new_tokens
    warm_up(decs, samples[0], n_new)

    # 3. clean decodes, alternating per sample
    runs: dict[str, list] = collections.defaultdict(list)
    for s in samples[1:]:
        for name, dec in decs.items():
            r, _, _ = decode_sample(dec, s, n_new)
            runs[name].append(r)

    def per_token_ms(rs) -> float:
        return 1e3 * sum(r.timings.decode_s for r in rs) / sum(len(r.token_ids) - 1 for r in rs)

    res: dict = {"machine": machine_info(args.device), "git": git_info(), "args": vars(args),
                 "samples": len(samples) - 1, "decoders": {}}
    ar_ms = per_token_ms(runs["ar"])

    def with_prepare_ms(rs) -> float:  # per token, the prepare's host time counted in the decode (as before 2026-12-01)
        return 1e3 * sum(r.timings.decode_s + r.timings.draft_prefill_s for r in rs) / sum(
            len(r.token_ids) - 1 for r in rs)

    for name in decs:
        rs = runs[name]
        steps = [st for r in rs for st in r.steps]
        rounds = max(1, len(steps))
        res["decoders"][name] = {
            "clean": {
                "ms_per_token": per_token_ms(rs), "dsr": ar_ms / per_token_ms(rs),
                "tau": sum(st.emitted for st in steps) / rounds,
                "round_ms": 1e3 * sum(st.draft_s + st.verify_s for st in steps) / rounds,
                "begin_ms": 1e3 * sum(r.timings.begin_s for r in rs) / len(rs),
                # The drafter's prepare (prompt feed) runs inside the prefill phase, beside the target's
                # prefill: its host ms, and the whole prefill's ms to set against AR's.
                "draft_prefill_ms": 1e3 * sum(r.timings.draft_prefill_s for r in rs) / len(rs),
                "prefill_ms": 1e3 * sum(r.timings.prefill_s for r in rs) / len(rs),
                "decode_ms_per_request": 1e3 * sum(r.timings.decode_s for r in rs) / len(rs),
                "tokens_per_request": sum(len(r.token_ids) for r in rs) / len(rs),
                "rounds_per_request": len(steps) / len(rs),
                "identical_to_ar": all(a.token_ids == b.token_ids for a, b in zip(runs["ar"], rs)),
                "dsr_prepare_in_decode": ar_ms / with_prepare_ms(rs),
            }}

    # 2. instrumented decodes (host timers), one decoder at a time
    for name, dec in decs.items():
        timers = HostTimers()
        instrument(dec, timers)
        try:
            rs = [decode_sample(dec, s, n_new)[0] for s in samples[1:]]
        finally:
            timers.restore()
        steps = [st for r in rs for st in r.steps]
        res["decoders"][name]["host"] = timers.table(len(steps), len(rs))
        res["decoders"][name]["instrumented_round_ms"] = 1e3 * sum(st.draft_s + st.verify_s for st in steps) / max(
            1, len(steps))
        res["decoders"][name]["rounds"] = len(steps)

    # 1b. optional: where the drafter's prepare spends its host time (cProfile of prepare alone)
    if args.profile_prepare:
        name = next(n for n in decs if n != "ar")
        res["prepare_profile"] = {"decoder": name, **profile_prepare(decs[name], samples[1:], args.profile_prepare)}

    # 1. graph costs (every graph of every decoder, once)
    costs: dict[str, dict] = {}
    for dec in decs.values():
        for gname, graph in inventory(dec).items():
            if gname not in costs:
                costs[gname] = graph_cost(graph, dev)
    res["graphs"] = costs

    # The expected GPU time of a round from the graphs it replayed (instrumented counts).
    for name in decs:
        r = res["decoders"][name]
        host = r["host"]
        gpu = 0.0
        for (t, n) in host.get("lm.replay (graph launch)", {}).get("keys", {}).items():
            gpu += n * costs.get(f"target {t}", {}).get("gpu_ms", 0.0)
        for key, n in host.get("drafter._run (chain launch)", {}).get("keys", {}).items():
            t, k = (int(x.split("=")[1]) for x in key.split())
            match = [v for g, v in costs.items() if g.startswith(f"draft chain T={t} k={k}")]
            gpu += n * (match[0]["gpu_ms"] if match else 0.0)
        prompt_feed = sum(host.get(f"drafter.{n}", {}).get("calls", 0)
                          for n in ("_prefill (eager prompt feed)", "_feed_graphs (prompt feed, graphs)"))
        r["gpu_ms_per_round_from_graphs"] = gpu / max(1, r["rounds"]) if "tree" not in name else None
        r["prompt_feed_calls"] = prompt_feed

    print(f"{'graph':48s} {'GPU ms':>8s} {'launch ms':>10s} {'latency ms':>11s}")
    for g, c in costs.items():
        print(f"{g:48s} {c['gpu_ms']:8.3f} {c['launch_ms']:10.3f} {c['latency_ms']:11.3f}")
    print()
    for name, r in res["decoders"].items():
        c = r["clean"]
        print(f"== {name}: {c['ms_per_token']:.3f} ms/token, DSR {c['dsr']:.2f}x, tau {c['tau']:.2f}, "
              f"round {c['round_ms']:.3f} ms (instrumented {r['instrumented_round_ms']:.3f}), begin {c['begin_ms']:.3f} ms, "
              f"prepare {c['draft_prefill_ms']:.3f} ms in a {c['prefill_ms']:.2f} ms prefill "
              f"(DSR {c['dsr_prepare_in_decode']:.2f}x with it in the decode), "
              f"{c['tokens_per_request']:.1f} tokens and {c['rounds_per_request']:.1f} rounds per request, "
              f"identical to AR: {c['identical_to_ar']}")
        for label, h in sorted(r["host"].items(), key=lambda kv: -kv[1]["ms_per_round"]):
            print(f"   {label:52s} {h['ms_per_round']:7.3f} ms/round {h['ms_per_request']:7.3f} ms/request "
                  f"{h['us_per_call']:8.1f} us/call x{h['calls']}" + (f"  {h['keys']}" if "keys" in h else ""))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "round_anatomy.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    print(f"wrote {out / 'round_anatomy.json'}")
    return 0


if __name__ == "__main__":
    with torch.inference_mode():
        sys.exit(main())
