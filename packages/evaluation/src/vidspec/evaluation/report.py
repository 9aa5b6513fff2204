"""Tables, plots and TensorBoard scalars from evaluation runs (``vidspec report DIR``).

Usage::

    vidspec report runs/sv                # one run folder (it holds records.jsonl)
    vidspec report runs/                  # every run folder below: one table per benchmark
    vidspec report runs/videomme          # shard folders below (vidspec eval --shard i/n): merged into one table

Writes ``DIR/report.md`` (a Markdown table per benchmark, the metric conventions stated),
``DIR/plots/<benchmark>-{pareto,tau,acceptance}.png`` and TensorBoard scalars under ``DIR/tb``.
The numbers are recomputed from the records, so a report of a run still in progress is valid for
the samples done.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vidspec.decoding.errors import ConfigError
from vidspec.decoding.methods import METHODS, method_names
from vidspec.evaluation.records import (
    CONVENTIONS,
    MethodSummary,
    category_scores,
    iter_runs,
    read_jsonl,
    run_file,
    summarize,
)


@dataclass
class RunData:
    """One run folder, read back.

    Attributes:
        path: the folder.
        benchmark: its benchmark name.
        config: its ``config.json`` (empty when missing).
        summary: its ``summary.json`` (empty when missing): git, versions, machine.
        records: its sample records.
        methods: per-method aggregates recomputed from the records.
        judgements: its judge verdicts (``judgements.jsonl``).
    """

    path: Path
    benchmark: str
    config: dict[str, Any]
    summary: dict[str, Any]
    records: list[dict]
    methods: dict[str, MethodSummary]
    judgements: list[dict] = field(default_factory=list)


def load_run(path: str | Path) -> RunData:
    """Read a run folder and aggregate its records."""
    path = Path(path)
    records = read_jsonl(run_file(path, "records.jsonl"))
    judgements = read_jsonl(run_file(path, "judgements.jsonl"))
    config = json.loads((path / "config.json").read_text()) if (path / "config.json").exists() else {}
    summary = json.loads((path / "summary.json").read_text()) if (path / "summary.json").exists() else {}
    benchmark = (records[0]["benchmark"] if records else None) or config.get("benchmark") or path.name
    order = [m for m in METHODS if any(r["method"] == m for r in records)]
    order += [m for m in dict.fromkeys(r["method"] for r in records) if m not in order]
    return RunData(path, benchmark, config, summary, records, summarize(records, order, judgements), judgements)


#: Config fields in which the parts of one sharded run differ (or may: each was resumed on its own).
_PER_SHARD = frozenset({"out", "shard", "progress", "warmup", "judge", "judge_base_url", "judge_model"})


def merge_shards(runs: list[RunData]) -> list[RunData]:
    """The runs with the parts of each sharded run (``vidspec eval --shard i/n``) merged into one.

    Parts belong together when their configs agree on everything but :data:`_PER_SHARD` and their
    shard counts match; their records and verdicts are pooled, so the merged run's table is the one a
    single process over all samples would have written (each sample is in one part only, with its AR
    record beside it). A set of parts with one missing is merged too, and its header says which parts
    it holds. Unsharded runs are returned as they are.
    """
    groups: dict[str, list[RunData]] = {}
    out: list[RunData] = []
    for run in runs:
        shard = run.config.get("shard")
        if not shard:
            out.append(run)
            continue
        key = json.dumps({**{k: v for k, v in run.config.items() if k not in _PER_SHARD},
                          "n_parts": str(shard).split("/")[-1]}, sort_keys=True, default=str)
        groups.setdefault(key, []).append(run)
    for parts in groups.values():
        parts.sort(key=lambda r: int(str(r.config["shard"]).split("/")[0]))
        records = [r for p in parts for r in p.records]
        judgements = [j for p in parts for j in p.judgements]
        order = list(dict.fromkeys(m for p in parts for m in p.methods))
        n = str(parts[0].config["shard"]).split("/")[-1]
        held = ",".join(str(p.config["shard"]).split("/")[0] for p in parts)
        config = {**parts[0].config, "shard": None, "shards": f"parts {held} of {n}"}
        common = Path(os.path.commonpath([str(p.path) for p in parts]))
        out.append(RunData(common, parts[0].benchmark, config, parts[0].summary, records,
                           summarize(records, order, judgements), judgements))
    return out


def _f(x: float | None, fmt: str = "{:.2f}", suffix: str = "") -> str:
    return "n/a" if x is None else fmt.format(x) + suffix


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def markdown_table(methods: dict[str, MethodSummary]) -> str:
    """The per-method table of one benchmark."""
    head = ("| method | n | τ | DSR | DSR, prepare in decode | ESR | tok/s | retention | score | accuracy | fact P / R | "
            "token-identical | loose / shift acc. |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for m, s in methods.items():
        lines.append("| " + " | ".join([
            m + (" (strict)" if m in method_names(lossless=True) else ""),
            str(s["n_samples"]),
            f"{s['tau']:.2f}",
            _f(s["dsr"], suffix="x"),
            _f(s.get("dsr_prepare_in_decode"), suffix="x"),
            _f(s["esr"], suffix="x"),
            _f(s["tokens_per_s"], "{:.1f}"),
            _pct(s["retention"]),
            _f(s["score"], "{:.3f}"),
            _pct(s["accuracy"]),
            "n/a" if s["fact_precision"] is None else f"{s['fact_precision']:.2f} / {s['fact_recall']:.2f}",
            _pct(s["token_identical_share"]),
            f"{s['loose_accepted']} / {s['shift_accepted']}",
        ]) + " |")
    return "\n".join(lines)


def judge_line(run: RunData) -> str:
    """The judge's own figures per method, as lmms-eval reports them: the mean score and, for the
    correctness judgements (MovieChat, VDC), the share judged correct. Empty when nothing was judged."""
    judged = {m: s for m, s in run.methods.items() if s.get("judge_score") is not None}
    if not judged:
        return ""
    return "Judge: " + "; ".join(
        f"{m} score {s['judge_score']:.2f}"
        + (f", correct {100 * s['judge_accuracy']:.1f}%" if s.get("judge_accuracy") is not None else "")
        + (f" ({s['judge_unparsable']} unreadable, scored as the protocol scores them)" if s["judge_unparsable"] else "")
        for m, s in judged.items())


def category_tables(run: RunData) -> str:
    """One table per category the records carry (e.g. Video-MME by duration, domain and task type):
    each value's score per method, with its sample count. Empty when the records carry none."""
    methods = list(run.methods)
    blocks = []
    for cat, values in category_scores(run.records, methods, run.judgements).items():
        shown = [m for m in methods if any(m in v for v in values.values())]
        head = f"| {cat} | " + " | ".join(shown) + " |"
        lines = [f"**By {cat}**", "", head, "|" + "---|" * (len(shown) + 1)]
        for value, per in values.items():
            cells = [f"{per[m][0]:.3f} (n={per[m][1]})" if m in per else "n/a" for m in shown]
            lines.append(f"| {value or '(none)'} | " + " | ".join(cells) + " |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _run_header(run: RunData) -> str:
    cfg, summ = run.config, run.summary
    machine = summ.get("machine", {})
    models = cfg.get("models") or summ.get("config", {}).get("models") or {}
    where = machine.get("gpu") or machine.get("cpu") or "unknown machine"
    parts = [
        f"- run: `{run.path}`" + (f" ({cfg['shards']}, merged)" if cfg.get("shards") else ""),
        f"- target `{cfg.get('target')}`, draft `{models.get('draft', cfg.get('draft'))}`, Sparrow "
        f"`{models.get('sparrow', cfg.get('sparrow'))}`; K = {(cfg.get('decode') or cfg).get('k') or 'method default'}; "
        f"max new tokens {cfg.get('max_new_tokens') or 'task default'}",
        f"- {len({r['sample_id'] for r in run.records})} samples; measured on {where} "
        f"({machine.get('cpus_usable', '?')} usable cores, torch {machine.get('torch', '?')}), "
        f"git {str(summ.get('git', {}).get('sha') or '?')[:10]}"
        + (" (dirty)" if summ.get("git", {}).get("dirty") else ""),
    ]
    return "\n".join(parts)


def plot_run(run: RunData, plots: Path, name: str | None = None) -> list[Path]:
    """Pareto (speedup vs fidelity), τ distribution and acceptance-by-position PNGs of one run.

    Args:
        run: the run.
        plots: folder to write ``<name>-{pareto,tau,acceptance}.png`` into.
        name: file name prefix and title (default: the run's benchmark).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots.mkdir(parents=True, exist_ok=True)
    written = []
    methods = run.methods
    name = name or run.benchmark

    # Pareto view: retention when the run has scores, else the share of token-identical outputs.
    use_ret = any(s["retention"] is not None for s in methods.values())
    # Filled: DSR with the drafter's prompt-side start in the prefill; hollow, when it differs: that start
    # counted in the decode (the conservative DSR the headline figures use: whether that start really hides
    # under the target's prefill is not guaranteed).
    fig, ax = plt.subplots(figsize=(5.5, 4))
    hollow = False
    for m, s in methods.items():
        x = s["retention"] if use_ret else s["token_identical_share"]
        y = s["dsr"]
        if x is None or y is None:
            continue
        dot = ax.scatter([100 * x], [y], s=40)
        y2 = s.get("dsr_prepare_in_decode")
        if y2 is not None and abs(y2 - y) > 1e-3:
            colour = dot.get_facecolor()[0]
            ax.plot([100 * x, 100 * x], [y2, y], color=colour, lw=0.8)
            ax.scatter([100 * x], [y2], s=40, facecolors="none", edgecolors=[colour])
            hollow = True
        ax.annotate(m, (100 * x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel(("retention vs AR (%)" if use_ret else "token-identical to AR (%) [no fidelity scores]")
                  + ("\nhollow: DSR with the drafter's prompt feed counted in the decode" if hollow else ""))
    ax.set_ylabel("DSR (decode speedup vs AR)")
    ax.set_title(f"{name}: speedup vs fidelity")
    fig.tight_layout()
    written.append(plots / f"{name}-pareto.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(max(5.5, 0.9 * len(methods)), 4))
    data = [[r["tau"] for r in run.records if r["method"] == m] for m in methods]
    ax.boxplot(data, showmeans=True)
    ax.set_xticks(range(1, len(methods) + 1), list(methods), rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("τ (tokens per target pass, per sample)")
    ax.set_title(f"{name}: τ distribution")
    fig.tight_layout()
    written.append(plots / f"{name}-tau.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for m, s in methods.items():
        acc = s["acceptance_by_position"]
        if acc:
            ax.plot(range(1, len(acc) + 1), acc, marker="o", ms=3, label=m)
    ax.set_xlabel("draft position")
    ax.set_ylabel("acceptance rate")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"{name}: acceptance by draft position")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    written.append(plots / f"{name}-acceptance.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)
    return written


def run_labels(runs: list[RunData]) -> list[str]:
    """A distinct name per run: its benchmark, plus its folder name where two runs share a benchmark."""
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.benchmark] = counts.get(r.benchmark, 0) + 1
    return [r.benchmark if counts[r.benchmark] == 1 else f"{r.benchmark}-{r.path.name}" for r in runs]


def write_tensorboard(runs: list[RunData], tb: Path) -> None:
    """Per-method aggregates (step 0) and per-sample τ/DSR (step = sample index) as scalars."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(tb))
    try:
        for run, label in zip(runs, run_labels(runs)):
            for m, s in run.methods.items():
                for key in ("tau", "dsr", "esr", "tokens_per_s", "retention", "accuracy", "token_identical_share"):
                    if s[key] is not None:
                        writer.add_scalar(f"{label}/{key}/{m}", float(s[key]), 0)
                recs = [r for r in run.records if r["method"] == m]
                for i, r in enumerate(recs):
                    writer.add_scalar(f"{label}/sample_tau/{m}", r["tau"], i)
                    if r["dsr"] is not None:
                        writer.add_scalar(f"{label}/sample_dsr/{m}", r["dsr"], i)
    finally:
        writer.close()


def render_markdown(runs: list[RunData], plot_paths: dict[str, list[Path]], base: Path) -> str:
    """The whole report as Markdown."""
    out = ["# vidspec evaluation report", "", f"**Conventions.** {CONVENTIONS}", "",
           "Strict methods (marked) must be token-identical to AR (100%); `n/a` means the metric does "
           "not apply or a side had nothing to compare (e.g. retention when AR scores 0, as untrained "
           "models do).", ""]
    for run in runs:
        out += [f"## {run.benchmark}", "", _run_header(run), "", markdown_table(run.methods), ""]
        if line := judge_line(run):
            out += [line, ""]
        if cats := category_tables(run):
            out += [cats, ""]
        for p in plot_paths.get(str(run.path), []):
            rel = p.relative_to(base) if p.is_relative_to(base) else p
            out.append(f"![{p.stem}]({rel})")
        out.append("")
    return "\n".join(out)


def write_report(path: str | Path, plots: bool = True, tensorboard: bool = True) -> Path:
    """Write ``report.md``, plots and TensorBoard scalars for the run(s) at ``path``.

    Returns:
        The path of ``report.md``.

    Raises:
        ConfigError: ``path`` holds no run.
    """
    base = Path(path)
    runs = [load_run(p) for p in iter_runs(base)]
    runs = merge_shards([r for r in runs if r.records])
    if not runs:
        raise ConfigError(f"{base}: no evaluation results (records.jsonl) found there or in its subfolders")
    plot_paths: dict[str, list[Path]] = {}
    if plots:
        # Two runs of one benchmark (e.g. two targets) must not overwrite each other's plots.
        for run, label in zip(runs, run_labels(runs)):
            plot_paths[str(run.path)] = plot_run(run, base / "plots", label)
    if tensorboard:
        write_tensorboard(runs, base / "tb")
    md = base / "report.md"
    md.write_text(render_markdown(runs, plot_paths, base) + "\n", encoding="utf-8")
    return md
