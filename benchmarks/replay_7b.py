"""Sparrow speculative decoding at 7B shapes, with the acceptance of a trained testbed replayed.

Why: the trained SynthVid testbed targets are small (4-26M parameters). On the H200 one of their
forward passes is bound by host time (graph launch, Python glue), not by the GPU, so a verify pass
costs as much as several draft steps and the DSR measured on them says little about a 7B
deployment, where a target pass reads ~15 GB of weights. This benchmark runs the *same code paths*
(FastLM's CUDA-graph AR and verify steps with the glue ``FastTarget`` adds, ``FastSparrowDrafter``
begin/propose/commit) on Qwen2.5-VL-7B / LLaVA-OneVision-7B text shapes with random bf16 weights, and
forces each round to accept the number of tokens a trained testbed accepted in a recorded eval
(``records.jsonl`` of ``vidspec eval``: per sample, the rounds' acceptance counts are recovered
from ``acceptance_by_position``). Round costs are measured; acceptance is the testbed's (τ is
therefore the testbed's τ). AR and the method run side by side on the same prompts, so the ratio
follows docs/algorithms.md, "Metrics" (decode time incl. the drafter's prompt feed; prefill excluded
on both sides, as DSR does). It is a projection of the testbed's acceptance onto 7B costs, not a
7B model's own acceptance: read it as "what this engine gives when the draft is as good as ours
on SynthVid".

Loose verification (sparrow-lvspec-pst) replays its acceptance through the strict code path; the
loose verifier's own host work per round is not in the replay (the eval records it on the testbed).

Run on the GPU machine from the repository root::

    PYTHONPATH=packages/decoding/src python benchmarks/replay_7b.py \\
        --records benchmarks/results/replay_7b_input_captions_h200.records.jsonl.gz --out "$OUT"     # ~2 min
    python benchmarks/replay_7b.py --smoke --records ... --out runs/replay-smoke   # CPU, tiny shapes, seconds

Prints a table and writes ``replay_7b.json`` (``replay_7b_smoke.json``) with machine info to ``--out``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sparrow_draft_step_gpu as sds  # noqa: E402  (shapes, bench target, machine info)


def record_schedule(r: dict) -> list[int] | None:
    """One eval record's per-round acceptance counts (order within the sample is not recorded).

    ``acceptance_by_position[i]`` is over the rounds that drafted > i tokens: all of them but a last
    round cut short by the token budget (it drafted ``short`` < K tokens). None when the counts do
    not add up to the record's ``accepted``.
    """
    rounds = int(r["target_passes"])
    rates = r.get("acceptance_by_position") or []
    k = len(rates)
    short = min(k, max(0, int(r["drafted"]) - (rounds - 1) * k))
    at_least = [round(f * (rounds - 1 + (short > i))) for i, f in enumerate(rates)]  # rounds accepting >= i+1
    ns = [sum(1 for c in at_least if c > j) for j in range(rounds)]  # round j: positions reached by > j rounds
    return ns if sum(ns) == int(r["accepted"]) else None


def schedules(records: Path, method: str, limit: int) -> list[list[int]]:
    """Per sample of ``method`` in ``records``, the acceptance count of each round (:func:`record_schedule`)."""
    out = []
    raw = records.read_bytes()
    if records.suffix == ".gz":  # the archived runs under benchmarks/results are kept compressed
        raw = gzip.decompress(raw)
    for line in raw.decode().splitlines():
        r = json.loads(line)
        if r.get("method") != method or not r.get("target_passes"):
            continue
        ns = record_schedule(r)
        if ns is None:
            raise SystemExit(f"{r['sample_id']}: acceptance counts do not sum to accepted={r['accepted']}")
        out.append(ns)
        if len(out) >= limit:
            break
    if not out:
        raise SystemExit(f"no {method!r} records with rounds in {records}")
    return out


class Glue:
    """What FastTarget does around a FastLM step (output clones, device-side accept read back)."""

    def __init__(self, flm, dev: torch.device):
        self.flm, self.dev = flm, dev
        self.accept = torch.zeros(2, dtype=torch.long, pin_memory=dev.type == "cuda")
        self.tril = {t: torch.ones(t, t, dtype=torch.bool).tril() for t in range(1, 65)}

    def step(self, tokens: list[int], start: int, depth: list[int] | None = None, mask: torch.Tensor | None = None):
        """One verify/AR step of ``tokens`` at ``start``: a chain, or a tree given ``depth`` and ``mask``."""
        from vidspec.decoding.types import VerifyOutput

        t = len(tokens)
        out = self.flm.step(tokens, start, start, 0, list(range(t)) if depth is None else depth,
                            self.tril[t] if mask is None else mask)
        self.accept.copy_(out.accept, non_blocking=True)
        ev = None
        if self.dev.type == "cuda":
            ev = torch.cuda.Event()
            ev.record()
        vo = VerifyOutput(logits=out.logits.clone(), hidden_penult=out.hidden["penult"][:t].clone())
        if ev is not None:
            ev.synchronize()
        n, nxt = self.accept.tolist()
        return vo, int(n), int(nxt)


class Replay:
    """One target/draft pair on one prompt: timed AR decodes and replayed speculative decodes."""

    def __init__(self, flm, glue: Glue, drafter, target, state, k: int, dev: torch.device, dtype: torch.dtype):
        self.flm, self.glue, self.drafter, self.target, self.state = flm, glue, drafter, target, state
        self.k, self.dev, self.dtype = k, dev, dtype
        self.L = int(state.prompt_ids.shape[0])

    def prefill(self) -> None:
        """Fill the target's cache with the prompt's positions (random states: costs only; untimed)."""
        flm, L = self.flm, self.L
        flm.new_cache()
        emb = torch.randn(L, flm.d, device=self.dev, dtype=self.dtype) * 0.02
        flm.prefill_chunk(emb, torch.arange(L, device=self.dev)[None].expand(3, L), 0, want_hidden=False,
                          last_logits=False)

    def ar(self, n_tokens: int) -> float:
        """Seconds to decode ``n_tokens`` greedily (the first comes from prefill)."""
        self.prefill()
        sds.sync(self.dev)
        t0 = time.perf_counter()
        tok, length = 11, self.L
        for _ in range(n_tokens - 1):
            _, _, tok = self.glue.step([tok], length)
            length += 1
        sds.sync(self.dev)
        return time.perf_counter() - t0

    def spec(self, ns: list[int]) -> tuple[float, int]:
        """Seconds and tokens of a speculative decode whose round r accepts ``ns[r]`` drafts."""
        self.prefill()
        sds.sync(self.dev)
        t0 = time.perf_counter()
        first = 11
        d = self.drafter
        d.begin(self.target, self.state, first)
        x, length, emitted = first, self.L, 1
        for n in ns:
            prop = d.propose(self.k)
            vo, _, _ = self.glue.step([x, *prop.tokens], length)
            n = min(n, len(prop.tokens))
            nxt = 13 + n  # any token: acceptance is replayed, not decided
            length += n + 1
            self.flm.cache.length = length  # rollback to x + the n accepted
            d.commit(n, nxt, vo)
            x = nxt
            emitted += n + 1
        sds.sync(self.dev)
        return time.perf_counter() - t0, emitted

    def warmup(self, first_schedules: list[list[int]]) -> None:
        """Capture every graph (verify T = 1..K+1, draft chains, prompt feed) outside the timing."""
        self.drafter.warmup(self.target, self.k)
        for t in range(1, self.k + 2):
            self.prefill()
            self.glue.step([11] * t, self.L)
        for ns in first_schedules:
            self.spec(ns)
        self.ar(8)


def run(args) -> dict:
    from vidspec.decoding.fast.lm import FastLM
    from vidspec.decoding.fast.sparrow_drafter import FastSparrowDrafter

    dev = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    res: dict = {"rows": []}
    sched = {m: schedules(Path(args.records), m, args.samples) for m in args.methods}
    for family in args.families:
        print(f"== {family}: {args.shape}-shaped target, {args.layers} layers ({args.dtype}, {dev})", flush=True)
        model, target, cfg, draft = sds.build_pair(family, args.shape, dev, dtype, layers=args.layers)
        for n_vis in args.visual:
            state = sds.make_state(target, args.text, n_vis, seed=n_vis)
            L = int(state.prompt_ids.shape[0])
            flm = FastLM(model.model.language_model, model.lm_head, max_len=L + 512,
                         hidden_layers={"penult": args.layers - 1}, graphs=dev.type == "cuda")
            drafter = FastSparrowDrafter(draft, max_len=args.text + 512,
                                         head_ids=sds.draft_vocabulary(cfg.vocab_size, args.draft_vocab))
            rp = Replay(flm, Glue(flm, dev), drafter, target, state, args.k, dev, dtype)
            rp.warmup([sched[m][0] for m in args.methods])
            for m in args.methods:
                ar_s, sp_s, toks, rounds = [], [], 0, 0
                for ns in sched[m]:
                    for _ in range(args.reps):  # interleaved: drift hits both alike
                        s, emitted = rp.spec(ns)
                        a = rp.ar(emitted)
                        sp_s.append(s / emitted)
                        ar_s.append(a / emitted)
                    toks += sum(ns) + len(ns)
                    rounds += len(ns)
                row = {"family": family, "method": m, "draft_vocab": args.draft_vocab or cfg.vocab_size, "visual_tokens": n_vis, "prompt_tokens": L, "k": args.k,
                       "samples": len(sched[m]), "tau": toks / rounds,
                       "ar_ms_per_token": 1e3 * statistics.median(ar_s),
                       "method_ms_per_token": 1e3 * statistics.median(sp_s)}
                row["dsr"] = row["ar_ms_per_token"] / row["method_ms_per_token"]
                res["rows"].append(row)
                print(f"  {m:<20} {n_vis:>6} visual: tau {row['tau']:.2f}, AR {row['ar_ms_per_token']:.3f} ms/token, "
                      f"{m} {row['method_ms_per_token']:.3f} ms/token, DSR {row['dsr']:.2f}x", flush=True)
            del rp, flm
        del model, draft, target
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", required=True, help="records.jsonl of a vidspec eval run with the methods below")
    ap.add_argument("--methods", default="sparrow,sparrow-lvspec-pst")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny shapes, 2 samples (seconds)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--shape", default=None, choices=sorted(sds.SHAPES))
    ap.add_argument("--layers", type=int, default=None, help="target layers (default 28, the 7B depth)")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--families", default="qwen2.5-vl,llava-ov")
    ap.add_argument("--visual", default="1024,16384", help="visual token counts of the prompt")
    ap.add_argument("--text", type=int, default=64, help="text tokens in the prompt")
    ap.add_argument("--k", type=int, default=4, help="draft tokens per round (the recorded run's K)")
    ap.add_argument("--samples", type=int, default=20, help="recorded samples to replay per method")
    ap.add_argument("--reps", type=int, default=1, help="timed repetitions per sample")
    ap.add_argument("--draft-vocab", type=int, default=0,
                    help="reduced draft head of this many token ids (costs only; 0 = the full vocabulary)")
    args = ap.parse_args(argv)
    if not sds.pick_device(args, "replay_7b.py"):
        return 2
    if args.smoke:
        args.shape, args.layers, args.visual, args.samples, args.text = args.shape or "smoke", args.layers or 2, "32", 2, 16
    args.shape = args.shape or "7b"
    args.layers = args.layers or 28
    args.dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    args.methods = [m for m in args.methods.split(",") if m]
    args.families = [f for f in args.families.split(",") if f]
    args.visual = [int(v) for v in str(args.visual).split(",") if v]
    conventions = ("per-token decode time after prefill (drafter prompt feed included), medians over samples; "
                   "acceptance counts replayed from the records; random weights: costs only")
    return sds.run_and_write(args, run, "replay_7b", conventions=conventions)


if __name__ == "__main__":
    sys.exit(main())
