"""Sparrow draft step: eager ``SparrowDrafter`` vs ``FastSparrowDrafter`` (static cache, CUDA graphs).

Times ``propose(K)`` (feed the pending tokens, then K greedy draft steps) of both drafters on the
same random draft, at ~1k and ~8k visual tokens in the prompt, on a target of the real 7B width and
vocabulary (Qwen2.5-VL-7B / LLaVA-OneVision-7B text shapes, random bf16 weights drawn on the GPU).
Only the parts of the target a Sparrow draft uses are needed (embedding table, LM head, final norm,
the layer type), so the target is built with 2 layers and a minimal vision tower, and the target's
prompt states are random: the draft's cost does not depend on them. Each timed round starts from
the state right after ``begin`` (as a fully rejected round leaves it), with either one pending
token (``x_last``: the round after a rejection) or K + 1 (the round after all K were accepted).

Run from the repository root on the GPU machine (sources on PYTHONPATH, only torch and
transformers needed)::

    PYTHONPATH=packages/decoding/src python benchmarks/sparrow_draft_step_gpu.py --out "$OUT"   # ~1 min
    python benchmarks/sparrow_draft_step_gpu.py --smoke --out runs/sds      # CPU, tiny shapes, seconds

``--shape mid`` uses a 1.5B-class width instead of 7B. Prints a table and writes
``sparrow_draft_step_gpu.json`` (``..._smoke.json`` with ``--smoke``) with machine info to ``--out``.
Timers are wall clock around ``propose`` with device synchronisation on both sides: the host
overhead is what the fast drafter removes, so it must be inside the measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from vidspec.evaluation.runner import git_info, machine_info

SHAPES = {
    # Qwen2.5-VL-7B / LLaVA-OV-7B (Qwen2-7B) text model widths.
    "7b": dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_attention_heads=28,
               num_key_value_heads=4),
    # Qwen2-1.5B-class width.
    "mid": dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_attention_heads=12,
                num_key_value_heads=2),
    "smoke": dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                  num_key_value_heads=2),
}
ROPE = {"rope_type": "default", "rope_theta": 1e6}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build_target_module(family: str, shape: str, device: torch.device, dtype: torch.dtype, layers: int = 2):
    """A ``layers``-layer VLM of the given text width with a minimal vision tower (random weights)."""
    import transformers

    text = dict(SHAPES[shape], num_hidden_layers=layers, max_position_embeddings=128000, rms_norm_eps=1e-6,
                hidden_act="silu", tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    d = text["hidden_size"]
    if family == "qwen2.5-vl":
        half = d // text["num_attention_heads"] // 2  # M-RoPE bands split the rotary half (t, h, w)
        sections = [half // 4, 3 * half // 8, half - half // 4 - 3 * half // 8]  # [16, 24, 24] at 7B
        cfg = transformers.Qwen2_5_VLConfig(
            text_config=dict(text, rope_parameters=dict(ROPE, mrope_section=sections)),
            vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=d,
                               patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                               fullatt_block_indexes=[0], in_channels=3),
            tie_word_embeddings=False)
        cls = transformers.Qwen2_5_VLForConditionalGeneration
    elif family == "llava-ov":
        cfg = transformers.LlavaOnevisionConfig(
            text_config=dict(text, model_type="qwen2", rope_parameters=ROPE),
            vision_config=dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64,
                               num_hidden_layers=1, num_attention_heads=2, image_size=28, patch_size=14),
            tie_word_embeddings=False)
        cls = transformers.LlavaOnevisionForConditionalGeneration
    else:
        raise SystemExit(f"unknown family {family!r}")
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(device):
        model = cls._from_config(cfg, dtype=dtype)
    return model.eval()


class BenchTarget:
    """What a Sparrow drafter reads of a target: the HF module, its device, prompt positions."""

    def __init__(self, model, family: str):
        self.model = model
        self.family = family
        self.name = f"random-{family}"
        self.device = model.lm_head.weight.device
        self.video_token_id = 0
        self._positions: torch.Tensor | None = None
        self._offset = 0

    def prefill_positions(self, input_ids: torch.Tensor, visual):
        assert self._positions is not None
        return self._positions.to(input_ids.device), self._offset


def make_state(target: BenchTarget, n_text: int, n_vis: int, seed: int):
    """A prompt of ``n_text`` text tokens around ``n_vis`` visual ones, with random target states."""
    from vidspec.decoding.types import TargetState

    g = torch.Generator().manual_seed(seed)
    cfg = target.model.config.get_text_config()
    before = max(1, n_text // 3)
    after = n_text - before
    L = before + n_vis + after
    ids = torch.randint(100, cfg.vocab_size, (L,), generator=g)
    vis = torch.arange(before, before + n_vis)
    ids[vis] = target.video_token_id
    # M-RoPE-like positions: text counts up, the video spans a (frames, 16, w) grid starting after the
    # text before it, text after the video continues after the grid's largest index (rope offset).
    pos = torch.arange(L).expand(3, L).clone()
    if target.family == "qwen2.5-vl" and n_vis:
        i = torch.arange(n_vis)
        w = 16
        hh = max(1, min(16, n_vis // w))
        pos[0, vis] = before + i // (w * hh)
        pos[1, vis] = before + (i // w) % hh
        pos[2, vis] = before + i % w
        start = int(pos[:, vis].max()) + 1
        pos[:, before + n_vis:] = torch.arange(start, start + after).expand(3, after)
        target._offset = start - (before + n_vis)
        target._positions = pos[:, None, :]
    else:
        target._offset = 0
        target._positions = pos[:1]
    d = cfg.hidden_size
    hp = (torch.randn(L, d, generator=g) * 0.5).to(target.device, target.model.lm_head.weight.dtype)
    return TargetState(request=None, prompt_ids=ids, cache=None, length=L,  # type: ignore[arg-type]
                       first_logits=torch.zeros(cfg.vocab_size), prompt_hidden_penult=hp, visual_positions=vis,
                       extra={"offset": target._offset, "visual": None})


class Case:
    """One drafter on one prompt; every timed round restarts from the state after ``begin``."""

    def __init__(self, drafter, target: BenchTarget, state, k: int, pending: int):
        self.d, self.target, self.state, self.k, self.pending = drafter, target, state, k, pending
        self.first = 11
        drafter.begin(target, state, self.first)
        self.base = drafter.cache_length
        g = torch.Generator().manual_seed(1)
        d = state.prompt_hidden_penult.shape[1]
        self.extra_hidden = (torch.randn(pending, d, generator=g) * 0.5).to(state.prompt_hidden_penult)
        self.times: list[float] = []
        self.tokens: tuple[int, ...] = ()

    def reset(self) -> None:
        from vidspec.decoding.drafters.sparrow import _Pending
        from vidspec.decoding.models.base import crop_cache

        d = self.d
        crop_cache(d.cache, self.base)
        del d._cache_index[self.base:]
        L = self.state.prompt_ids.shape[0]
        hidden = [self.state.prompt_hidden_penult[-1]] + list(self.extra_hidden[1:])
        d._pending = _Pending(tokens=[self.first] + [12 + i for i in range(self.pending - 1)], hidden=hidden,
                              index=list(range(L, L + self.pending)))
        d._draft = []

    def round(self, record: bool) -> None:
        self.reset()
        dev = self.target.device
        sync(dev)
        t0 = time.perf_counter()
        prop = self.d.propose(self.k)
        sync(dev)
        dt = time.perf_counter() - t0
        self.tokens = prop.tokens
        if record:
            self.times.append(dt)

    def ms(self) -> float:
        return 1e3 * statistics.median(self.times)


def build_pair(family: str, shape: str, device: torch.device, dtype: torch.dtype, layers: int = 2):
    """A random target of ``shape`` and a random Sparrow draft bound to it: ``(model, BenchTarget, config, draft)``."""
    from vidspec.decoding.drafters.sparrow import SparrowConfig, SparrowDraftModel

    model = build_target_module(family, shape, device, dtype, layers=layers)
    target = BenchTarget(model, family)
    cfg = SparrowConfig.from_target(model, family, target.name)
    torch.manual_seed(1)
    with torch.device(device):
        draft = SparrowDraftModel(cfg)
    draft.bind(model, init_norm=True)
    draft.to(device=device, dtype=dtype)
    return model, target, cfg, draft


def draft_vocabulary(vocab: int, n: int | None) -> torch.Tensor | None:
    """``n`` token ids for a reduced draft head (a fixed random set: costs only), or None for all."""
    if not n or n >= vocab:
        return None
    return torch.randperm(vocab, generator=torch.Generator().manual_seed(0))[:n]


def run(args) -> dict:
    from vidspec.decoding.drafters.sparrow import SparrowDrafter
    from vidspec.decoding.fast.sparrow_drafter import FastSparrowDrafter

    dev = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    results: dict = {"rows": []}
    for family in args.families:
        print(f"== {family}: building {args.shape}-shaped target ({args.dtype}, {dev})", flush=True)
        model, target, cfg, draft = build_pair(family, args.shape, dev, dtype)
        head_ids = draft_vocabulary(cfg.vocab_size, args.draft_vocab)
        for n_vis in args.visual:
            state = make_state(target, args.text, n_vis, seed=n_vis)
            for pending in sorted({1, args.k + 1}):
                eager = Case(SparrowDrafter(draft, head_ids=head_ids), target, state, args.k, pending)
                fast = Case(FastSparrowDrafter(draft, max_len=args.max_len, graphs=not args.no_graphs,
                                               head_ids=head_ids), target, state, args.k, pending)
                for i in range(args.warmup + args.reps):  # interleaved: load drift hits both alike
                    for c in (eager, fast):
                        c.round(record=i >= args.warmup)
                row = {"family": family, "draft_vocab": args.draft_vocab or cfg.vocab_size, "visual_tokens": n_vis, "prompt_tokens": int(state.prompt_ids.shape[0]),
                       "draft_cache_entries": fast.base + pending + args.k - 1, "pending": pending, "k": args.k,
                       "eager_ms_per_round": eager.ms(), "fast_ms_per_round": fast.ms(),
                       "eager_ms_per_step": eager.ms() / args.k, "fast_ms_per_step": fast.ms() / args.k,
                       "speedup": eager.ms() / fast.ms(), "same_tokens": eager.tokens == fast.tokens,
                       "fast_graphs": fast.d.graphs, "reps": args.reps}
                results["rows"].append(row)
                print(f"  {n_vis:>6} visual, pending {pending}: eager {row['eager_ms_per_round']:.3f} ms, "
                      f"fast {row['fast_ms_per_round']:.3f} ms ({row['speedup']:.2f}x)", flush=True)
        del model, draft, target
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return results


def print_table(res: dict) -> None:
    print(f"\nSparrow draft propose(K={res['args']['k']}), shape {res['args']['shape']}, {res['args']['dtype']}, "
          f"{res['machine']['gpu'] or res['machine']['device']}")
    head = (f"{'family':<11} {'visual':>7} {'draft KV':>9} {'pending':>8} {'eager ms':>9} {'fast ms':>8} "
            f"{'eager/step':>11} {'fast/step':>10} {'speedup':>8} {'same':>5}")
    print(head)
    for r in res["rows"]:
        print(f"{r['family']:<11} {r['visual_tokens']:>7} {r['draft_cache_entries']:>9} {r['pending']:>8} "
              f"{r['eager_ms_per_round']:>9.3f} {r['fast_ms_per_round']:>8.3f} {r['eager_ms_per_step']:>11.3f} "
              f"{r['fast_ms_per_step']:>10.3f} {r['speedup']:>7.2f}x {str(r['same_tokens']):>5}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "benchmarks/results")
    ap.add_argument("--smoke", action="store_true", help="CPU-sized shapes and few repetitions (seconds)")
    ap.add_argument("--device", default=None, help="default: cuda (cpu with --smoke when no GPU)")
    ap.add_argument("--shape", default=None, choices=sorted(SHAPES), help="target width (default 7b; smoke: smoke)")
    ap.add_argument("--dtype", default=None, help="default bfloat16 (float32 on CPU)")
    ap.add_argument("--families", default="qwen2.5-vl,llava-ov")
    ap.add_argument("--visual", default="1024,8192", help="visual token counts")
    ap.add_argument("--text", type=int, default=64, help="text tokens in the prompt")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--max-len", type=int, default=8192, help="FastSparrowDrafter cache capacity (text positions)")
    ap.add_argument("--no-graphs", action="store_true", help="FastSparrowDrafter without CUDA graphs")
    ap.add_argument("--draft-vocab", type=int, default=0,
                    help="reduced draft head of this many token ids (EAGLE-3 style; 0 = the full vocabulary)")
    args = ap.parse_args(argv)
    if not pick_device(args, "sparrow_draft_step_gpu.py"):
        return 2
    if args.smoke:
        args.shape = args.shape or "smoke"
        args.visual, args.reps, args.warmup, args.k, args.text = "64,256", 3, 1, 3, 16
    args.shape = args.shape or "7b"
    args.dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    args.families = [f for f in args.families.split(",") if f]
    args.visual = [int(v) for v in str(args.visual).split(",") if v]
    return run_and_write(args, run, "sparrow_draft_step_gpu", show=print_table)


def pick_device(args, script: str) -> bool:
    """Default ``args.device`` to CUDA (CPU for a smoke run); False, with a message, when there is none."""
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else ("cpu" if args.smoke else None)
    if args.device is None:
        print(f"{script} needs a CUDA device (or --smoke / --device cpu)", file=sys.stderr)
        return False
    if args.smoke and args.device == "cpu":
        torch.set_num_threads(1)
    return True


def run_and_write(args, run, name: str, conventions: str | None = None, show=None) -> int:
    """``run(args)`` under inference mode, then its results with the arguments, machine info and total
    seconds (and ``conventions``) shown by ``show`` and written as ``NAME.json`` into ``args.out``."""
    t0 = time.perf_counter()
    with torch.inference_mode():
        res = run(args)
    res["args"] = dict(vars(args))
    res["machine"] = machine_info(str(args.device))
    res["git"] = git_info()
    res["total_s"] = time.perf_counter() - t0
    if conventions:
        res["conventions"] = conventions
    if show is not None:
        show(res)
    write_results(res, args.out, name, args.smoke)
    return 0


def write_results(res: dict, out: str | Path, name: str, smoke: bool) -> Path:
    """Write ``NAME.json`` (``NAME_smoke.json`` for a smoke run) into ``out``; print where."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / (f"{name}_smoke.json" if smoke else f"{name}.json")
    path.write_text(json.dumps(res, indent=2) + "\n")
    print(f"wrote {path} in {res['total_s']:.1f} s")
    return path


if __name__ == "__main__":
    sys.exit(main())
