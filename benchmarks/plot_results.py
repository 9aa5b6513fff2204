"""The figures of docs/results.md, drawn from the result files kept in benchmarks/results.

- ``docs/img/speedup_vs_retention.png``: left, decode speedup (DSR, the drafter's prompt feed counted in the
  decode) against caption retention for every method of three ``vidspec eval``/``vidspec demo`` runs (H200
  captions, H200 long videos at ~26k visual tokens, the CPU demo); right, the loose-verification knobs of
  ``loose_ablation.py`` on CPU (τ against retention of AR's fact precision; τ rather than DSR because that run's
  timings were taken on a shared machine, while τ and retention are deterministic).
- ``docs/img/tau_vs_video_length.png``: Sparrow's τ against the number of visual tokens: left, the long-video
  recipe on the H200 (one line per video, 64 vs 1536 frames, and the mean); right, ``sparrow_long_video.py``
  on CPU (Sparrow and the draft VLM at 8, 64 and 256 frames).

- ``docs/img/loose_tradeoff.png``: the loose knobs on CPU, per release set (``loose_defaults.py``, the tuning
  seed): τ against the caption fact-F1 lost, the defaults and LVSpec's own rule marked.

The PNGs are written as 256-colour palette images to stay small. Usage (seconds on CPU)::

    .venv/bin/python benchmarks/plot_results.py            # writes them into docs/img/
    .venv/bin/python benchmarks/plot_results.py --out DIR
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

#: (run folder under benchmarks/results, label, marker) of the speedup-vs-retention panel
EVAL_RUNS = (
    ("captions_every_method_h200", "H200, 40 captions (~1.1k visual tokens)", "o"),
    ("long_every_method_h200_1536f", "H200, 10 long videos (~26k visual tokens)", "s"),
    ("demo_cpu", "2 CPU cores, vidspec demo (8 videos)", "^"),
)
#: visual tokens per frame of the SynthVid LLaVA-OV targets (16 patches + 1 newline)
TOKENS_PER_FRAME = 17


def _records(path: Path) -> list[dict]:
    """The records of a ``records.jsonl.gz`` file."""
    return [json.loads(line) for line in gzip.decompress(path.read_bytes()).decode().splitlines() if line.strip()]


def _save_png(fig, path: Path) -> Path:
    """Save ``fig`` as a 256-colour palette PNG (a fraction of the RGBA file's size)."""
    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    Image.open(buf).convert("RGB").quantize(colors=256).save(path, optimize=True)
    return path


def _log_ticks(ax, ticks: list[int]) -> None:
    """A log x axis with plain labels at ``ticks`` only."""
    ax.set_xscale("log")
    ax.minorticks_off()
    ax.set_xticks(ticks, [f"{t:,}" for t in ticks])


def speedup_vs_retention(out: Path) -> Path:
    """Draw ``speedup_vs_retention.png`` into ``out``; return its path."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4))
    for run, label, marker in EVAL_RUNS:
        methods = json.loads((RESULTS / run / "summary.json").read_text())["methods"]
        xs, ys = [], []
        for name, s in methods.items():
            if s.get("retention") is None:
                continue
            xs.append(100 * s["retention"])
            ys.append(s.get("dsr_prepare_in_decode") or s["dsr"])
            left.annotate(name, (xs[-1], ys[-1]), textcoords="offset points", xytext=(4, 2), fontsize=6)
        left.scatter(xs, ys, marker=marker, s=30, label=label)
    left.axhline(1.0, color="grey", lw=0.8, ls="--")
    left.set_xlabel("caption retention vs AR (%)")
    left.set_ylabel("DSR over AR (prompt feed in the decode)")
    left.set_title("Every method: speedup vs retention")
    left.legend(fontsize=7, loc="upper left")

    abl = json.loads((RESULTS / "loose_ablation_cpu.json").read_text())["methods"]
    groups = {"lvspec, cosine": "lvspec λ", "lvspec, attention": "lvspec[attn] λ", "random relaxation": "random",
              "lvspec-pst": "lvspec-pst", "sparrow-lvspec-pst": "sparrow-lvspec-pst"}
    for label, prefix in groups.items():
        pts = [(100 * v["retention_precision"], v["tau"], k) for k, v in abl.items()
               if k.startswith(prefix) and v.get("retention_precision") is not None]
        if pts:
            right.plot([p[0] for p in pts], [p[1] for p in pts], "o-" if "λ" in prefix or prefix == "random" else "D",
                       ms=4, lw=0.8, label=label)
            for x, y, k in pts:
                knob = k.split(" ", 1)[1] if " " in k else ""
                if knob:
                    right.annotate(knob, (x, y), textcoords="offset points", xytext=(3, 2), fontsize=6)
    for name, marker in (("sd", "x"), ("fly", "+"), ("sparrow", "*")):
        v = abl[name]
        right.scatter([100 * v["retention_precision"]], [v["tau"]], marker=marker, s=50, label=f"{name} (strict)"
                      if name != "fly" else name)
    right.set_xlabel("retention of AR's fact precision (%)")
    right.set_ylabel("τ (tokens per target pass)")
    right.set_title("Loose-verification knobs, CPU, K = 4")
    right.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    path = _save_png(fig, out / "speedup_vs_retention.png")
    plt.close(fig)
    return path


def tau_vs_video_length(out: Path) -> Path:
    """Draw ``tau_vs_video_length.png`` into ``out``; return its path."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4))
    frames = (64, 1536)
    per_video: dict[str, list[float]] = {}
    for n in frames:
        for r in _records(RESULTS / f"long_sparrow_h200_{n}f" / "records.jsonl.gz"):
            if r["method"] == "sparrow":
                per_video.setdefault(r["sample_id"], []).append(r["tau"])
    xs = [n * TOKENS_PER_FRAME for n in frames]
    for i, taus in enumerate(per_video.values()):
        if len(taus) == len(frames):  # a small vertical offset per video keeps equal lines apart
            off = 0.4 * (i / max(1, len(per_video) - 1) - 0.5)
            left.plot(xs, [t + off for t in taus], color="tab:blue", alpha=0.3, lw=0.8)
    means = [sum(t[i] for t in per_video.values()) / len(per_video) for i in range(len(frames))]
    left.plot(xs, means, "o-", color="black", lw=2, label=f"mean of {len(per_video)} videos")
    for x, m in zip(xs, means):
        left.annotate(f"{m:.2f}", (x, m), textcoords="offset points", xytext=(5, 5), fontsize=8)
    _log_ticks(left, xs)
    left.set_xlabel("visual tokens (64 and 1536 frames; one thin line per video)")
    left.set_ylabel("Sparrow τ, K = 16")
    left.set_title("Long-video recipe, H200: ratio 0.92 (bar 0.9)")
    left.legend(fontsize=7)

    cpu = json.loads((RESULTS / "sparrow_long_video_cpu.json").read_text())["lengths"]
    lengths = sorted(cpu.values(), key=lambda v: v["frames"])
    for name, label in (("sparrow", "Sparrow draft"), ("sd", "draft VLM (sd)")):
        pts = [(v["visual_tokens"], v[name]["tau"]) for v in lengths if name in v]
        right.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=label)
    right.axhline(1.0, color="grey", lw=0.8, ls="--")
    _log_ticks(right, [v["visual_tokens"] for v in lengths])
    right.set_xlabel("visual tokens (8, 64 and 256 frames)")
    right.set_ylabel("strict τ, K = 4")
    right.set_title("Releases trained on 8-frame clips, CPU")
    right.legend(fontsize=7)
    fig.tight_layout()
    path = _save_png(fig, out / "tau_vs_video_length.png")
    plt.close(fig)
    return path


#: (settings label in loose_defaults_cpu.json, marker) of the points each method's line joins: the probability
#: gate at λ 1 as ε rises
EPS_LINE = tuple(f"prob eps {e} lam 1" for e in (0.2, 0.3, 0.4, 0.5))
LOOSE_COLORS = {"lvspec": "tab:blue", "lvspec-pst": "tab:orange", "fly": "tab:green", "sparrow-lvspec-pst": "tab:red"}


def loose_tradeoff(out: Path) -> Path:
    """Draw ``loose_tradeoff.png`` into ``out`` from ``loose_defaults_cpu.json``; return its path.

    One panel per release set (the tuning seed): τ against the caption fact-F1 lost against AR, on a
    symmetric-log axis so that the 0-2% region where the defaults were chosen stays readable beside the paper
    rule's 30-60% losses. Each loose method's line follows the probability gate as ε rises; the other knob
    settings are its open markers; the defaults are circled and the paper rule crossed.
    """
    import matplotlib.pyplot as plt

    runs = json.loads((RESULTS / "loose_defaults_cpu.json").read_text())["runs"]
    tune = [(name, run) for name, run in runs.items() if run.get("role") == "tune"]
    fig, axes = plt.subplots(1, len(tune), figsize=(5.6 * len(tune), 4.6), squeeze=False)
    default_label = runs[tune[0][0]]["defaults_label"]
    for ax, (name, run) in zip(axes[0], tune):
        settings = run["settings"]

        def point(label: str, method: str, settings: dict = settings) -> tuple[float, float] | None:
            row = settings.get(label, {}).get("methods", {}).get(method, {}).get("synthvid_captions")
            return None if row is None else (max(0.0, 100 * (1 - row["retention"])), row["tau"])

        for method, color in LOOSE_COLORS.items():
            line = [p for lab in EPS_LINE if (p := point(lab, method))]
            if line:
                ax.plot([p[0] for p in line], [p[1] for p in line], "o-", color=color, ms=4, lw=1, label=method)
            others = [p for lab in settings if lab not in EPS_LINE + ("strict", "paper") and (p := point(lab, method))]
            ax.scatter([p[0] for p in others], [p[1] for p in others], facecolors="none", edgecolors=color, s=25)
            if (p := point(default_label, method)) is not None:
                ax.scatter([p[0]], [p[1]], s=180, facecolors="none", edgecolors="black", lw=1.5)
            if (p := point("paper", method)) is not None:
                ax.scatter([p[0]], [p[1]], marker="X", s=90, color=color, edgecolors="black", lw=0.6)
        for method, ls in (("sd", ":"), ("sparrow", "--")):
            if (p := point("strict", method)) is not None:
                ax.axhline(p[1], color="grey", lw=0.9, ls=ls, label=f"{method} (strict) τ")
        ax.axvline(1.0, color="black", lw=0.8, ls="-.", label="1% lost (99% retention)")
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_xlim(-0.1, 100)
        ax.set_xlabel("caption fact-F1 lost vs AR (%), symlog; 0 = all kept")
        ax.set_ylabel("τ on CPU (tokens per target pass)")
        ax.set_title(f"{name}: circled = defaults, X = paper rule", fontsize=9)
        ax.legend(fontsize=6.5, loc="lower right")
    fig.tight_layout()
    path = _save_png(fig, out / "loose_tradeoff.png")
    plt.close(fig)
    return path


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "img"), help="folder for the PNGs")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for path in (speedup_vs_retention(out), tau_vs_video_length(out), loose_tradeoff(out)):
        print(f"{path} ({path.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
