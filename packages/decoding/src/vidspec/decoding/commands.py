"""``vidspec generate``: decode one video + prompt with a target, a drafter and a verifier.

Usage::

    vidspec generate --target tiny-qwen2.5-vl --draft tiny-qwen2.5-vl-draft --method sd \\
        --video clip.mp4 --prompt "Describe the video." --k 4 --max-new-tokens 64 --json

    vidspec generate --target T --method tree-sparrow --sparrow data/releases/sparrow-T \\
        --video clip.mp4 --tree-total 48 --tree-depth 8 --tree-top-k 8 --json

``--json`` prints one JSON object (method, text, token_ids, num_new_tokens, target_passes, tau,
prefill_s, decode_s, wall_s, ...); otherwise the text is streamed and a one-line summary goes to
stderr.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from vidspec.decoding.cli import normalize_flags
from vidspec.decoding.config import DecodeConfig
from vidspec.decoding.errors import ConfigError
from vidspec.decoding.methods import build_decoder, get_method
from vidspec.decoding.types import Request


def generate(
    video: str,
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
    device: str = "cpu",
    dtype: str | None = None,
    json_output: bool = False,
    decode: DecodeConfig | None = None,
) -> int:
    """Generate text for one video with the chosen speculative decoding method.

    Args:
        video: path of the video file (mp4, mkv, ...).
        prompt: the user's question or instruction.
        target: target model: hub id, local directory, or a built-in tiny name.
        draft: draft model for the drafting methods (default: the target's built-in draft for tiny targets).
        sparrow: Sparrow draft release folder (for the sparrow methods).
        allow_target_mismatch: use a Sparrow draft even if it was distilled from another target.
        method: a registered method (``vidspec generate --help`` lists them; tree methods draft a dynamic
            tree per round, verified strictly in one pass, greedy only).
        max_new_tokens: most tokens to generate.
        temperature: 0 for greedy; > 0 samples (strict sd stays lossless in distribution).
        top_p: nucleus sampling mass.
        seed: RNG seed for sampling.
        max_frames: frames sampled from the video (default: the model's).
        device: cpu, cuda, cuda:1, ...
        dtype: float32, bfloat16 or float16 (default: bf16 on CUDA, fp32 on CPU).
        json_output: print one JSON object instead of streaming text (also --json).
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
    decode.check_device(device)
    if max_frames is not None and max_frames < 1:  # 0 would silently mean "the model's default"
        raise ConfigError(f"--max-frames must be >= 1, got {max_frames}")
    if not Path(video).exists():
        # Checked before loading models, so a typo costs nothing.
        from vidspec.decoding.errors import VideoError

        raise VideoError(f"video file not found: {video}")
    if spec.drafter == "sparrow":
        draft = sparrow or draft
        if draft is None:
            raise ConfigError(f"method {method} needs --sparrow DIR (a Sparrow draft release)")
        if decode.draft_vocab is not None:  # checked before any model loads
            from vidspec.decoding.drafters.sparrow import load_draft_vocab

            load_draft_vocab(draft, decode.draft_vocab)
    elif decode.draft_vocab is not None:
        raise ConfigError(f"--draft-vocab applies to the Sparrow methods, not to {method}")
    decoder = build_decoder(method, target=target, draft=draft, config=decode, device=device, dtype=dtype,
                            max_frames=max_frames, temperature=temperature,
                            allow_target_mismatch=allow_target_mismatch)
    t0 = time.perf_counter()
    clip = decoder.target.read_video(video)
    video_s = time.perf_counter() - t0
    request = Request(prompt=prompt, clip=clip)
    try:
        return _run(decoder, request, method, target, decode.engine, video_s, clip, max_new_tokens, temperature, top_p, seed,
                    json_output)
    except ValueError as e:
        if decode.engine == "fast" and "raise max_len" in str(e):  # FastTarget's static cache is full
            raise ConfigError(f"{e.args[0].replace('raise max_len', 'raise --fast-max-len')}") from None
        raise


def _run(decoder, request: Request, method: str, target: str, engine: str, video_s: float, clip,
         max_new_tokens: int, temperature: float, top_p: float, seed: int, json_output: bool) -> int:
    if json_output:
        result = decoder.generate(request, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                                  seed=seed)
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
            "video_s": video_s,
            "prefill_s": result.timings.prefill_s,
            "decode_s": result.timings.decode_s,
            "wall_s": video_s + result.timings.wall_s,
            "num_frames": clip.num_frames,
            "frame_size": list(clip.size),
        }
        if get_method(method).is_tree:
            record["tree"] = {"total_tokens": decoder.total_tokens, "depth": decoder.depth, "top_k": decoder.top_k}
        print(json.dumps(record))
        return 0
    t1 = time.perf_counter()
    for piece in decoder.stream(request, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                                seed=seed):
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    print(f"[{method}] {time.perf_counter() - t1 + video_s:.2f}s wall", file=sys.stderr)
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
    cfg = parser.parse_args(argv)
    options = {k: v for k, v in vars(cfg).items() if not k.startswith("_") and k != "config"}
    decode, rest = DecodeConfig.split(options)
    return generate(**rest, decode=decode)
