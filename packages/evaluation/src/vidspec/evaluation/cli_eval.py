"""``vidspec eval``, ``vidspec report``, ``vidspec eval-ci`` and ``vidspec demo``.

Usage::

    vidspec eval --benchmark synthvid_captions --data data/cache/synthvid --target T --draft D \\
        --sparrow data/releases/sparrow-T --methods ar,sd,lvspec,lvspec-pst,fly,sparrow,sparrow-lvspec-pst \\
        --out runs/sv --limit 50 [--judge] [--k 4] [--device cuda] [--engine fast]
    vidspec eval --benchmark synthvid_captions --data data/cache/synthvid --target T --sparrow S \\
        --methods ar,sparrow,tree-sparrow --tree-total 48 --tree-depth 8 --tree-top-k 8 --out runs/tree
    vidspec report runs/sv
    vidspec eval-ci [--update-baseline --reason "..."]
    vidspec demo [--limit 3] [--out DIR] [--train]

Parsers are generated with jsonargparse from the typed functions below (``--help`` shows their
docstrings; ``--print_config`` prints the resolved options). Flags take dashes or underscores.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from vidspec.decoding.cli import normalize_flags, one_line
from vidspec.decoding.config import LOOSE_HELP, DecodeConfig, apply_loose_preset
from vidspec.decoding.errors import ConfigError, VidspecError
from vidspec.decoding.methods import METHODS, method_names
from vidspec.evaluation.eval_ci import CI_MAX_NEW_TOKENS, CI_VIDEOS


def evaluate(
    benchmark: str,
    out: str,
    methods: str = ",".join(METHODS),
    target: str = "tiny-qwen2.5-vl",
    draft: str | None = None,
    sparrow: str | None = None,
    allow_target_mismatch: bool = False,
    data: str | None = None,
    split: str | None = None,
    limit: int | None = None,
    video_dir: str | None = None,
    sparrow_k: int | None = None,
    max_new_tokens: int | None = None,
    frames: int | None = None,
    device: str = "auto",
    dtype: str | None = None,
    share_video: bool = False,
    warmup: bool = True,
    judge: bool = False,
    judge_base_url: str | None = None,
    judge_model: str | None = None,
    no_progress: bool = False,
    report: bool = True,
    shard: str | None = None,
    judge_workers: int = 8,
    judge_timeout: float = 60.0,
    judge_keep_unparsable: bool = False,
    decode: DecodeConfig | None = None,
) -> int:
    """Run decoding methods side by side on a benchmark (AR first as the baseline); resumable.

    Args:
        benchmark: registered benchmark name (synthvid_captions, synthvid_mcq, videomme, ...) or a task YAML.
        out: run folder; rerunning with the same folder continues where it stopped.
        methods: comma-separated methods; ar always runs. Without --sparrow the sparrow methods (tree-sparrow
            too) are dropped from the default list. tree-sd and tree-sparrow draft a dynamic tree per round.
        target: target model: built-in tiny name, release/HF folder, or hub id.
        draft: draft VLM for sd, lvspec, lvspec-pst, fly, tree-sd (default: a tiny target's built-in draft).
        sparrow: Sparrow draft release folder for the sparrow methods ("random": untrained, for tests).
        allow_target_mismatch: use a Sparrow draft distilled from another target.
        data: local dataset folder/file or hub id (default: the task's dataset).
        split: dataset split (default: the task's).
        limit: evaluate the first N samples only.
        video_dir: folder with the benchmark's videos (needed for hub datasets).
        sparrow_k: draft tokens per round of sparrow and sparrow-lvspec-pst (default: --k).
        max_new_tokens: generation budget per sample (default: the task's).
        frames: frames sampled per video (default: the task's).
        device: cpu, cuda, cuda:1, ...; "auto" (the default) is CUDA when present, else the CPU.
        dtype: float32, bfloat16 or float16 (default: bf16 on CUDA, fp32 on CPU).
        share_video: read each sample's video once for all methods, every record counting that read's
            seconds (the long set's 1536-frame reads take seconds each). Recorded; resuming refuses another.
        warmup: one untimed decode per method before measuring.
        judge: score open-ended outputs with the GPT judge (VIDSPEC_JUDGE_BASE_URL, VIDSPEC_JUDGE_MODEL,
            OPENAI_API_KEY or the two flags below; the key is read from the environment only).
        judge_base_url: judge API root.
        judge_model: judge model name.
        no_progress: hide progress bars.
        report: write report.md, plots and TensorBoard scalars into the run folder at the end.
        shard: i/n: run part i (from 0) of n disjoint parts of the samples (by sample id), e.g. one per GPU,
            each with its own --out; `vidspec report` on their parent folder merges them into one table.
        judge_workers: judge requests in flight at once (each retried as before; verdicts cached).
        judge_timeout: seconds to wait for one judge response before retrying.
        judge_keep_unparsable: on a rerun, keep unparsable verdicts instead of asking the judge again.
        decode: how every method decodes (:class:`~vidspec.decoding.config.DecodeConfig`); on the command
            line and in recipes its fields are options of their own (``--k``, ``--lam``, ``--engine``,
            ``--tree-total``, ...). Recorded in the run's config.json; resuming refuses a change of any
            of them but ``--fast-max-len``.
    """
    from vidspec.evaluation.report import markdown_table, write_report
    from vidspec.evaluation.runner import EvalConfig, run_eval

    chosen = [m.strip() for m in methods.split(",") if m.strip()]
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    if sparrow is None and methods == ",".join(METHODS):
        # The default list names every method; without a Sparrow release the ones that need it are
        # dropped rather than failing (naming them explicitly without --sparrow is still an error).
        chosen = [m for m in chosen if m not in method_names(drafter="sparrow")]
    cfg = EvalConfig(
        benchmark=benchmark, out=out, data=data, split=split, limit=limit, video_dir=video_dir, target=target,
        draft=draft, sparrow=sparrow, allow_target_mismatch=allow_target_mismatch, methods=tuple(chosen),
        sparrow_k=sparrow_k, max_new_tokens=max_new_tokens, frames=frames, device=device, dtype=dtype,
        decode=decode or DecodeConfig(), share_video=share_video, warmup=warmup, judge=judge,
        judge_base_url=judge_base_url, judge_model=judge_model, progress=not no_progress, shard=shard,
        judge_workers=judge_workers, judge_timeout_s=judge_timeout, judge_keep_unparsable=judge_keep_unparsable,
    )
    summary = run_eval(cfg)
    print(markdown_table(summary["methods"]))
    print(f"\nsummary: {out}/summary.json, records: {out}/records.jsonl")
    if report:
        print(f"report: {write_report(out)}")
    return 0


def report(path: str, no_plots: bool = False, no_tensorboard: bool = False) -> int:
    """Markdown tables (one per benchmark), PNG plots and TensorBoard scalars from evaluation runs.

    Args:
        path: a run folder (``vidspec eval --out``) or a folder of run folders.
        no_plots: skip the PNG plots.
        no_tensorboard: skip the TensorBoard scalars.
    """
    from vidspec.evaluation.report import write_report

    md = write_report(path, plots=not no_plots, tensorboard=not no_tensorboard)
    print(md.read_text(encoding="utf-8"))
    print(f"written: {md}")
    return 0


def eval_ci(out: str | None = None, baseline: str = "benchmarks/baselines/eval-ci.json",
            update_baseline: bool = False, reason: str | None = None, limit: int = CI_VIDEOS,
            max_new_tokens: int = CI_MAX_NEW_TOKENS, releases: str = "data/releases", progress: bool = False) -> int:
    """Small fixed CPU evaluation compared with committed baselines; exit 1 on a regression.

    Args:
        out: run folder (default: a new temporary folder, so every run measures afresh).
        baseline: the committed baseline JSON.
        update_baseline: record this run's figures as the baseline (needs --reason).
        reason: why the baseline changes; stored in the file (and put it in the commit message).
        limit: SynthVid validation videos (the committed baseline uses the default).
        max_new_tokens: tokens per sample (the committed baseline uses the default).
        releases: folder of committed testbed releases (else the built-in tiny models).
        progress: show progress bars.
    """
    from vidspec.evaluation.eval_ci import run_eval_ci

    return run_eval_ci(out=out, baseline=baseline, update_baseline=update_baseline, reason=reason, limit=limit,
                       max_new_tokens=max_new_tokens, releases=releases, progress=progress)


def demo(out: str | None = None, limit: int = 8, max_new_tokens: int = 40, data_dir: str | None = None,
         releases: str = "data/releases", train: bool = False, no_progress: bool = False, paper_rule: bool = False) -> int:
    """The embedded default: SynthVid videos, every method side by side, a table and a report (CPU ok).

    Args:
        out: output folder (default: runs/demo-<time>).
        limit: SynthVid validation videos to evaluate.
        max_new_tokens: tokens generated per video.
        data_dir: where the SynthVid validation set is built (default: data/cache/demo-synthvid).
        releases: folder of committed testbed releases (target, draft VLM, Sparrow draft).
        train: retrain the small CPU testbed models from their recipes first (long).
        no_progress: hide progress bars.
        paper_rule: run the loose methods with LVSpec's own rule (lam 0.7, every loose mismatch accepted)
            instead of the headline's probability gate (lam 1, eps 0.3).
    """
    from vidspec.evaluation.demo import run_demo

    return run_demo(out=out, limit=limit, max_new_tokens=max_new_tokens, data_dir=data_dir, releases=releases,
                    train=train, progress=not no_progress, paper_rule=paper_rule)


def _takes_decode(fn: Callable[..., int]) -> bool:
    import inspect

    return "decode" in inspect.signature(fn).parameters


def _bare_bools(fn: Callable[..., int], argv: list[str]) -> list[str]:
    """``--judge`` alone means ``--judge=true`` for the function's bool options (jsonargparse wants a value)."""
    import inspect

    flags = {f"--{n}" for n, p in inspect.signature(fn).parameters.items() if p.annotation in (bool, "bool")}
    if _takes_decode(fn):
        flags |= {f"--{f.name}" for f in dataclasses.fields(DecodeConfig) if f.type in (bool, "bool")}
    out = []
    for i, tok in enumerate(argv):
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if tok in flags and (nxt is None or nxt.startswith("--") or nxt.lower() not in ("true", "false")):
            out.append(tok + "=true")
        else:
            out.append(tok)
    return out


def _parse_and_call(fn: Callable[..., int], prog: str, argv: list[str], positional: tuple[str, ...] = ()) -> int:
    from jsonargparse import ActionConfigFile, ArgumentParser

    parser = ArgumentParser(prog=prog, description=(fn.__doc__ or "").splitlines()[0], exit_on_error=False,
                            default_env=False)
    # A recipe (configs/eval/*.yaml) gives the same options; flags after it override it.
    parser.add_argument("--config", action=ActionConfigFile, help="a YAML file with these options")
    _add_arguments(parser, fn, as_positional=bool(positional))
    try:
        cfg = parser.parse_args(_bare_bools(fn, normalize_flags(argv)))
    except VidspecError:
        raise
    except Exception as e:  # jsonargparse's ArgumentError (a ConfigError may hide inside it)
        cause = e.__cause__ or e.__context__
        if isinstance(cause, VidspecError):
            raise cause from None
        raise ConfigError(one_line(str(e))) from None
    options = {k: v for k, v in vars(cfg).items() if not k.startswith("_") and k != "config"}
    if _takes_decode(fn):
        options = apply_loose_preset(options, options.pop("loose", None), normalize_flags(argv))
        decode, options = DecodeConfig.split(options)
        options["decode"] = decode
    return fn(**options)


def _add_arguments(parser, fn: Callable[..., int], as_positional: bool = False) -> None:
    """``fn``'s parameters as options; a ``decode`` parameter contributes the DecodeConfig fields, flat."""
    if _takes_decode(fn):
        parser.add_function_arguments(fn, as_positional=as_positional, skip={"decode"})
        parser.add_class_arguments(DecodeConfig, nested_key=None, instantiate=False)
        parser.add_argument("--loose", type=str | None, default=None, help=LOOSE_HELP)
    else:
        parser.add_function_arguments(fn, as_positional=as_positional)


def eval_parser():
    """The parser of ``vidspec eval`` (recipe tests parse configs/eval/*.yaml with it)."""
    from jsonargparse import ActionConfigFile, ArgumentParser

    parser = ArgumentParser(prog="vidspec eval", exit_on_error=False, default_env=False)
    parser.add_argument("--config", action=ActionConfigFile)
    _add_arguments(parser, evaluate)
    return parser


def eval_main(argv: list[str]) -> int:
    """Entry point of ``vidspec eval``."""
    return _parse_and_call(evaluate, "vidspec eval", argv)


def report_main(argv: list[str]) -> int:
    """Entry point of ``vidspec report DIR``."""
    return _parse_and_call(report, "vidspec report", argv, positional=("path",))


def eval_ci_main(argv: list[str]) -> int:
    """Entry point of ``vidspec eval-ci``."""
    return _parse_and_call(eval_ci, "vidspec eval-ci", argv)


def demo_main(argv: list[str]) -> int:
    """Entry point of ``vidspec demo``."""
    return _parse_and_call(demo, "vidspec demo", argv)
