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
from typing import Any, get_args, get_type_hints

from vidspec.decoding.cli import normalize_flags
from vidspec.decoding.errors import ConfigError
from vidspec.decoding.methods import (
    DEFAULT_FAST_MAX_LEN,
    DEFAULT_TREE,
    METHODS,
    SPARROW_METHODS,
    TREE_METHODS,
    build_decoder,
    check_engine,
    check_gemv,
    check_tree,
)
from vidspec.decoding.types import Request
from vidspec.decoding.verifiers.registry import RelevanceOptions

_RELEVANCE_HINTS = get_type_hints(RelevanceOptions)
#: ``--scorer`` values: LVSpec's relevance scorers (:class:`RelevanceOptions`).
SCORERS: tuple[str, ...] = get_args(_RELEVANCE_HINTS["scorer"])
#: ``--attention-heads`` values: how the attention scorer reduces its per-head masses.
ATTENTION_HEADS: tuple[str, ...] = get_args(_RELEVANCE_HINTS["attention_heads"])


def relevance_options(scorer: str = "cosine", attention_heads: str = "mean", probe: str | None = None) -> dict[str, Any]:
    """The loose options of ``--scorer``, ``--attention-heads`` and ``--probe``, checked before models load.

    Raises:
        ConfigError: an unknown scorer or head reduction, ``--scorer probe`` without an existing
            ``--probe`` file, or ``--probe`` with another scorer.
    """
    if scorer not in SCORERS:
        raise ConfigError(f"unknown --scorer {scorer!r} (choose from {', '.join(SCORERS)})")
    if attention_heads not in ATTENTION_HEADS:
        raise ConfigError(f"unknown --attention-heads {attention_heads!r} (choose from {', '.join(ATTENTION_HEADS)})")
    if scorer == "probe":
        if not probe:
            raise ConfigError("--scorer probe needs --probe FILE (a relevance probe written by ProbeScorer.save)")
        if not Path(probe).is_file():
            raise ConfigError(f"--probe {probe}: relevance probe file not found")
    elif probe:
        raise ConfigError(f"--probe is used by --scorer probe only (got --scorer {scorer})")
    return dict(scorer=scorer, attention_heads=attention_heads, probe_path=probe)


def generate(
    video: str,
    prompt: str = "Describe the video in detail.",
    target: str = "tiny-qwen2.5-vl",
    draft: str | None = None,
    sparrow: str | None = None,
    allow_target_mismatch: bool = False,
    method: str = "ar",
    k: int | None = None,
    max_new_tokens: int = 64,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int = 0,
    max_frames: int | None = None,
    device: str = "cpu",
    dtype: str | None = None,
    lam: float = 0.7,
    top_n: int = 10,
    relevance_layer: int | None = None,
    predicate: str = "always",
    eps: float = 0.01,
    top_k: int = 5,
    pst_window: int = 3,
    protect: bool = True,
    scorer: str = "cosine",
    attention_heads: str = "mean",
    probe: str | None = None,
    engine: str = "eager",
    fast_max_len: int = DEFAULT_FAST_MAX_LEN,
    fast_gemv: str = "off",
    draft_vocab: int | None = None,
    tree_total: int = DEFAULT_TREE["total_tokens"],
    tree_depth: int = DEFAULT_TREE["depth"],
    tree_top_k: int = DEFAULT_TREE["top_k"],
    json_output: bool = False,
) -> int:
    """Generate text for one video with the chosen speculative decoding method.

    Args:
        video: path of the video file (mp4, mkv, ...).
        prompt: the user's question or instruction.
        target: target model: hub id, local directory, or a built-in tiny name.
        draft: draft model for the drafting methods (default: the target's built-in draft for tiny targets).
        sparrow: Sparrow draft release folder (for the sparrow methods).
        allow_target_mismatch: use a Sparrow draft even if it was distilled from another target.
        method: one of ar, sd, lvspec, lvspec-pst, fly, sparrow, sparrow-lvspec-pst, tree-sd, tree-sparrow
            (the tree methods draft an EAGLE-2 dynamic tree per round, verified strictly in one pass;
            greedy only).
        k: draft tokens per round (default 4; 15 for fly; ignored by ar and the tree methods, see --tree-*).
        max_new_tokens: most tokens to generate.
        temperature: 0 for greedy; > 0 samples (strict sd stays lossless in distribution).
        top_p: nucleus sampling mass.
        seed: RNG seed for sampling.
        max_frames: frames sampled from the video (default: the model's).
        device: cpu, cuda, cuda:1, ...
        dtype: float32, bfloat16 or float16 (default: bf16 on CUDA, fp32 on CPU).
        lam: LVSpec relaxation ratio λ (share of positions verified loosely; 0 = strict).
        top_n: LVSpec: visual tokens averaged in the relevance score.
        relevance_layer: hidden-state layer for relevance (default: the middle layer).
        predicate: LVSpec loose acceptance predicate: always, topk or prob.
        eps: predicate prob: accept a loose mismatch when the target gives the draft token at least
            this probability.
        top_k: predicate topk: accept a loose mismatch when the draft token is in the target's top k.
        pst_window: PST: positions a shifted token may move (lvspec-pst).
        protect: keep negations, numbers and comparatives strict under loose verification.
        scorer: LVSpec relevance scorer: cosine (top-N cosine to visual tokens, the paper's), attention
            (attention mass on visual positions at --relevance-layer; eager engine only), probe (a linear
            probe, --probe FILE) or random (control).
        attention_heads: --scorer attention: mean or max of the per-head masses.
        probe: --scorer probe: safetensors file written by ProbeScorer.save.
        engine: eager (the Hugging Face modules as loaded) or fast (static KV cache, CUDA graphs on CUDA;
            greedy strict output is token-identical).
        fast_max_len: fast engine: KV cache positions (prompt + generated tokens + one verify block).
        fast_gemv: fast engine on CUDA: off (cuBLAS), decode (Triton GEMV for single-token steps) or all
            (verify steps of up to 16 tokens too, split-K; the 7B-shape verify step of issue 8).
        draft_vocab: Sparrow methods (tree-sparrow too): draft only the release's N most frequent tokens
            (a reduced head; the release needs a draft_vocab.json from 'vidspec sparrow-vocab').
        tree_total: tree methods: draft nodes kept per tree (the target verifies this many + 1 in one pass).
        tree_depth: tree methods: tree depth (draft passes per round; the most tokens a round accepts).
        tree_top_k: tree methods: children per expanded node and frontier width.
        json_output: print one JSON object instead of streaming text (also --json).
    """
    if method not in METHODS:
        raise ConfigError(f"unknown method {method!r} (choose from {', '.join(METHODS)})")
    if max_new_tokens < 1:
        raise ConfigError(f"--max-new-tokens must be >= 1, got {max_new_tokens}")
    if temperature < 0:
        raise ConfigError(f"--temperature must be >= 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise ConfigError(f"--top-p must be in (0, 1], got {top_p}")
    check_engine(engine)
    tree = check_tree({"total_tokens": tree_total, "depth": tree_depth, "top_k": tree_top_k})
    relevance = relevance_options(scorer, attention_heads, probe)
    if fast_max_len < 1:
        raise ConfigError(f"--fast-max-len must be >= 1, got {fast_max_len}")
    gemv = check_gemv(fast_gemv, engine, device)
    if max_frames is not None and max_frames < 1:  # 0 would silently mean "the model's default"
        raise ConfigError(f"--max-frames must be >= 1, got {max_frames}")
    if not Path(video).exists():
        # Checked before loading models, so a typo costs nothing.
        from vidspec.decoding.errors import VideoError

        raise VideoError(f"video file not found: {video}")
    if method in SPARROW_METHODS:
        draft = sparrow or draft
        if draft is None:
            raise ConfigError(f"method {method} needs --sparrow DIR (a Sparrow draft release)")
        if draft_vocab is not None:  # checked before any model loads
            from vidspec.decoding.sparrow import load_draft_vocab

            load_draft_vocab(draft, draft_vocab)
    elif draft_vocab is not None:
        raise ConfigError(f"--draft-vocab applies to the Sparrow methods, not to {method}")
    loose = dict(lam=lam, top_n=top_n, predicate=predicate, eps=eps, top_k=top_k, pst_window=pst_window,
                 protect=protect, **relevance)
    decoder = build_decoder(
        method, target=target, draft=draft, k=k, device=device, dtype=dtype, max_frames=max_frames,
        relevance_layer=relevance_layer, temperature=temperature, loose=loose,
        allow_target_mismatch=allow_target_mismatch, engine=engine, fast_options={"max_len": fast_max_len, "gemv": gemv},
        draft_vocab=draft_vocab, tree=tree,
    )
    t0 = time.perf_counter()
    clip = decoder.target.read_video(video)
    video_s = time.perf_counter() - t0
    request = Request(prompt=prompt, clip=clip)
    try:
        return _run(decoder, request, method, target, engine, video_s, clip, max_new_tokens, temperature, top_p, seed,
                    json_output)
    except ValueError as e:
        if engine == "fast" and "raise max_len" in str(e):  # FastTarget's static cache is full
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
        if method in TREE_METHODS:
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
    """Entry point of ``vidspec generate`` (see :func:`generate` for the options)."""
    from jsonargparse import ArgumentParser

    argv = ["--json_output=true" if a == "--json" else a for a in normalize_flags(argv)]
    parser = ArgumentParser(prog="vidspec generate", description=generate.__doc__.splitlines()[0],
                            exit_on_error=True)
    parser.add_function_arguments(generate, as_positional=False)
    cfg = parser.parse_args(argv)
    return generate(**{k: v for k, v in vars(cfg).items() if not k.startswith("_") and k != "config"})
