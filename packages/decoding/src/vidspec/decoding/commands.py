"""``vidspec generate``: decode videos + prompts with a target, a drafter and a verifier.

Usage::

    vidspec generate --target tiny-qwen2.5-vl --draft tiny-qwen2.5-vl-draft --method sd \\
        --video clip.mp4 --prompt "Describe the video." --k 4 --max-new-tokens 64 --json

    vidspec generate --target T --method tree-sparrow --sparrow data/releases/sparrow-T \\
        --video clip.mp4 --tree-total 48 --tree-depth 8 --tree-top-k 8 --json

    # many requests in one process (models loaded and warmed once): one JSON line per request
    vidspec generate --target T --method sd --draft D --device cuda --requests requests.jsonl

``--json`` prints one JSON object (method, engine, text, token_ids, num_new_tokens, target_passes, tau,
load_s, warmup_s, prefill_s, decode_s, decode_ms_per_token, wall_s, the adaptive policy's k_history
and drafting_stopped_at, ...); otherwise the text is streamed and a one-line summary goes to stderr.
``--requests FILE`` reads one JSON object per line (``video``, optional ``prompt``, ``max_new_tokens``
and ``id``) and prints one JSON line per request in that order; ``load_s`` and ``warmup_s`` are paid
once and repeated in every line.

One-time costs are apart from the requests' times: ``load_s`` is loading the models and building the
decoder, ``warmup_s`` the decoder's warm-up before the first request (on the fast engine:
compilation and the CUDA graphs of every step the requests can reach; see
:func:`vidspec.decoding.loops.warm.warm_up`; ``--warmup false`` leaves them to the first request).
The fast engine keeps torch's compiled kernels in a user cache folder
(:mod:`vidspec.decoding.fast.compile_cache`), so a second process's warm-up is shorter.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from vidspec.decoding.cli import normalize_flags
from vidspec.decoding.config import LOOSE_HELP, DecodeConfig, apply_loose_preset
from vidspec.decoding.errors import ConfigError
from vidspec.decoding.methods import build_decoder, get_method
from vidspec.decoding.prompts import check_prompts
from vidspec.decoding.types import Request


def generate(
    video: str | None = None,
    prompt: str = "Describe the video in detail.",
    target: str = "tiny-qwen2.5-vl",
    draft: str | None = None,
    sparrow: str | None = None,
    allow_target_mismatch: bool = False,
    method: str = "ar",
    max_new_tokens: int = 64,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int = 0,
    max_frames: int | None = None,
    device: str = "auto",
    dtype: str | None = None,
    json_output: bool = False,
    requests: str | None = None,
    warmup: bool = True,
    decode: DecodeConfig | None = None,
) -> int:
    """Generate text for videos with the chosen speculative decoding method.

    Args:
        video: path of the video file (mp4, mkv, ...); not with ``requests``.
        prompt: the user's question or instruction.
        target: target model: hub id, local directory, or a built-in tiny name.
        draft: draft model for the drafting methods (default: the target's built-in draft for tiny targets).
        sparrow: Sparrow draft release folder (for the sparrow methods).
        allow_target_mismatch: use a Sparrow draft even if it was distilled from another target.
        method: a registered method (``vidspec generate --help`` lists them; tree methods draft a dynamic
            tree per round, verified strictly in one pass, greedy only).
        max_new_tokens: most tokens to generate (per request).
        temperature: 0 for greedy; > 0 samples (strict sd stays lossless in distribution).
        top_p: nucleus sampling mass.
        seed: RNG seed for sampling.
        max_frames: frames sampled from the video (default: the model's).
        device: cpu, cuda, cuda:1, ...; "auto" (the default) is CUDA when present, else the CPU.
        dtype: float32, bfloat16 or float16 (default: bf16 on CUDA, fp32 on CPU).
        json_output: print one JSON object instead of streaming text (also --json).
        requests: a JSONL file of requests (``{"video": ..., "prompt": ..., "max_new_tokens": ..., "id": ...}``
            per line; prompt and max_new_tokens default to the flags): all decoded by one warm decoder, one
            JSON line out per request.
        warmup: pay compilation and graph capture before the first request (``warmup_s``); false leaves
            them inside the first request's times.
        decode: how to decode (:class:`~vidspec.decoding.config.DecodeConfig`: K, LVSpec's knobs, the
            relevance scorer, the tree shape, the engine); on the command line its fields are flags of
            their own (``--k``, ``--lam``, ``--engine``, ``--tree-total``, ...).
    """
    spec = get_method(method)
    decode = decode or DecodeConfig()
    if max_new_tokens < 1:
        raise ConfigError(f"--max-new-tokens must be >= 1, got {max_new_tokens}")
    if temperature < 0:
        raise ConfigError(f"--temperature must be >= 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise ConfigError(f"--top-p must be in (0, 1], got {top_p}")
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    decode.check_device(device)
    if max_frames is not None and max_frames < 1:  # 0 would silently mean "the model's default"
        raise ConfigError(f"--max-frames must be >= 1, got {max_frames}")
    if requests is not None:
        if video is not None:
            raise ConfigError("give --video or --requests, not both")
        jobs = read_requests(requests, prompt, max_new_tokens)
    elif video is None:
        raise ConfigError("--video FILE is required (or --requests FILE.jsonl)")
    else:
        jobs = [{"video": video, "prompt": prompt, "max_new_tokens": max_new_tokens}]
    for job in jobs:  # checked before loading models, so a typo costs nothing
        if not Path(job["video"]).exists():
            from vidspec.decoding.errors import VideoError

            raise VideoError(f"video file not found: {job['video']}")
    if spec.drafter == "sparrow":
        draft = sparrow or draft
        if draft is None:
            raise ConfigError(f"method {method} needs --sparrow DIR (a Sparrow draft release)")
        if decode.draft_vocab is not None:  # checked before any model loads
            from vidspec.decoding.drafters.sparrow import load_draft_vocab

            load_draft_vocab(draft, decode.draft_vocab)
    elif decode.draft_vocab is not None:
        raise ConfigError(f"--draft-vocab applies to the Sparrow methods, not to {method}")
    t_load = time.perf_counter()
    decoder = build_decoder(method, target=target, draft=draft, config=decode, device=device, dtype=dtype,
                            max_frames=max_frames, temperature=temperature,
                            allow_target_mismatch=allow_target_mismatch)
    _sync(decoder.target.device)
    if requests is not None:  # every prompt's control tokens checked before the first decode (prompts.py)
        check_prompts(decoder.target, [(f"request {i}", j["prompt"]) for i, j in enumerate(jobs, 1)], f"--requests {requests}")
    once = {"load_s": time.perf_counter() - t_load, "warmup_s": 0.0}
    engine = getattr(decoder, "engine", decode.engine)
    try:
        if warmup:
            once["warmup_s"] = float(_warm(decoder, jobs, engine)["warmup_s"])
        if requests is None:
            job = jobs[0]
            clip, video_s = job.pop("_clip", None) or _read(decoder, job["video"])
            return _run(decoder, Request(prompt=job["prompt"], clip=clip), method, target, engine, video_s, clip,
                        job["max_new_tokens"], temperature, top_p, seed, json_output, once)
        for job in jobs:
            clip, video_s = job.pop("_clip", None) or _read(decoder, job["video"])
            result = decoder.generate(Request(prompt=job["prompt"], clip=clip), max_new_tokens=job["max_new_tokens"],
                                      temperature=temperature, top_p=top_p, seed=seed)
            record = {**({"id": job["id"]} if "id" in job else {}), "video": job["video"],
                      **result_record(decoder, result, method, target, engine, video_s, clip, once)}
            print(json.dumps(record), flush=True)
        return 0
    except ValueError as e:
        if engine == "fast" and "raise max_len" in str(e):  # FastTarget's static cache is full
            raise ConfigError(f"{e.args[0].replace('raise max_len', 'raise --fast-max-len')}") from None
        raise


def read_requests(path: str, prompt: str, max_new_tokens: int) -> list[dict]:
    """The requests of a JSONL file: ``video`` (required), ``prompt`` and ``max_new_tokens`` (the flags' values
    when absent), ``id`` (optional, copied to the output line). Blank lines are skipped."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"--requests {path}: file not found")
    jobs = []
    for i, line in enumerate(file.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"--requests {path}:{i}: not JSON ({e.msg})") from None
        if not isinstance(item, dict) or not isinstance(item.get("video"), str):
            raise ConfigError(f"--requests {path}:{i}: each line needs a \"video\" path")
        unknown = sorted(set(item) - {"video", "prompt", "max_new_tokens", "id"})
        if unknown:
            raise ConfigError(f"--requests {path}:{i}: unknown key(s) {', '.join(unknown)}")
        n = item.get("max_new_tokens", max_new_tokens)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"--requests {path}:{i}: max_new_tokens must be an integer >= 1, got {n!r}")
        jobs.append({**item, "prompt": str(item.get("prompt", prompt)), "max_new_tokens": n})
    if not jobs:
        raise ConfigError(f"--requests {path}: no requests in the file")
    return jobs


def _read(decoder, video: str):
    """The clip of ``video`` at the target's frame budget, and the seconds reading it took."""
    t0 = time.perf_counter()
    clip = decoder.target.read_video(video)
    return clip, time.perf_counter() - t0


def _sync(device) -> None:
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.synchronize(device)


def _warm(decoder, jobs: list[dict], engine: str) -> dict:
    """Warm ``decoder`` for ``jobs``: the fast engine's graphs cover the cache lengths they can reach.

    The first request's prompt length is taken from its video (read once here); the others may be a
    bucket shorter or reach as far as the longest budget plus one round.
    """
    if engine != "fast":
        return decoder.warmup()
    lm = getattr(decoder.target, "lm", None)
    if lm is None:
        return decoder.warmup()
    first = jobs[0]
    first["_clip"] = _read(decoder, first["video"])  # kept for the request itself
    request = Request(prompt=first["prompt"], clip=first["_clip"][0])
    ids, _ = decoder.target.build_prompt(request)
    n = int(ids.shape[0])
    span = max(j["max_new_tokens"] for j in jobs) + int(getattr(decoder, "k", 0) or getattr(decoder, "depth", 0)) + 1
    low = max(0, n - lm.bucket) if len(jobs) == 1 else 0
    # The first request itself is the warm-up decode (a few tokens): its video's shapes are compiled for sure.
    return decoder.warmup(request=request, min_context=low,
                          max_context=min(lm.max_len - 1, n + span if len(jobs) == 1 else max(n + span, 4096)))


def result_record(decoder, result, method: str, target: str, engine: str, video_s: float, clip,
                  once: dict) -> dict:
    """The JSON record of one request (``--json`` and each ``--requests`` line)."""
    record = {
        "method": method,
        "engine": engine,
        "target": target,
        "draft": decoder.drafter.name,
        "k": decoder.k,
        "text": result.text,
        "token_ids": list(result.token_ids),
        "num_new_tokens": result.num_new_tokens,
        "target_passes": result.target_passes,
        "tau": result.tau,
        "loose_accepted": result.loose_accepted,
        "shift_accepted": result.shift_accepted,
        # Draft positions of a round's accepted path (a tree drafts more nodes than a path holds).
        "acceptance_by_position": result.acceptance_by_position()[: decoder.k],
        "finish_reason": result.finish_reason,
        "load_s": once["load_s"],
        "warmup_s": once["warmup_s"],
        "video_s": video_s,
        "prefill_s": result.timings.prefill_s,
        "decode_s": result.timings.decode_s,
        # Per token after the first (the first comes from the prefill).
        "decode_ms_per_token": (1e3 * result.timings.decode_s / (result.num_new_tokens - 1)
                                if result.num_new_tokens > 1 else None),
        "wall_s": video_s + result.timings.wall_s,
        "num_frames": clip.num_frames,
        "frame_size": list(clip.size),
    }
    adaptation = getattr(decoder, "last_adaptation", None)
    if adaptation is not None:
        record.update(adaptation)
    if get_method(method).is_tree:
        record["tree"] = {"total_tokens": decoder.total_tokens, "depth": decoder.depth, "top_k": decoder.top_k}
    return record


def _run(decoder, request: Request, method: str, target: str, engine: str, video_s: float, clip,
         max_new_tokens: int, temperature: float, top_p: float, seed: int, json_output: bool, once: dict) -> int:
    if json_output:
        result = decoder.generate(request, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                                  seed=seed)
        print(json.dumps(result_record(decoder, result, method, target, engine, video_s, clip, once)))
        return 0
    t1 = time.perf_counter()
    for piece in decoder.stream(request, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                                seed=seed):
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    print(f"[{method}] {time.perf_counter() - t1 + video_s:.2f}s wall (load {once['load_s']:.2f}s, "
          f"warm-up {once['warmup_s']:.2f}s, {engine} engine)", file=sys.stderr)
    return 0


def generate_main(argv: list[str]) -> int:
    """Entry point of ``vidspec generate`` (see :func:`generate`; the DecodeConfig fields are flags too)."""
    from jsonargparse import ArgumentParser

    argv = ["--json_output=true" if a == "--json" else a for a in normalize_flags(argv)]
    from vidspec.decoding.methods import METHODS

    description = f"{generate.__doc__.splitlines()[0]} Methods: {', '.join(METHODS)}."
    parser = ArgumentParser(prog="vidspec generate", description=description, exit_on_error=True)
    parser.add_function_arguments(generate, as_positional=False, skip={"decode"})
    parser.add_class_arguments(DecodeConfig, nested_key=None, instantiate=False)
    parser.add_argument("--loose", type=str | None, default=None, help=LOOSE_HELP)
    cfg = parser.parse_args(argv)
    options = {k: v for k, v in vars(cfg).items() if not k.startswith("_") and k != "config"}
    options = apply_loose_preset(options, options.pop("loose", None), argv)
    decode, rest = DecodeConfig.split(options)
    return generate(**rest, decode=decode)
