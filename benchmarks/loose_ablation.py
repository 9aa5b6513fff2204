"""Loose-verification ablation on the SynthVid testbed: τ vs fidelity vs speed, side by side.

One process, the release target, the release draft VLM and the release Sparrow draft, greedy,
batch 1, CPU. For every held-out caption prompt every method decodes the same request (methods
interleaved per sample so timing noise is shared); then every method answers the same MCQs.

Methods: ar; sd (strict, lossless); lvspec at λ ∈ {0.3, 0.5, 0.7, 0.9}; lvspec-pst (λ 0.7,
PST w 3 on the lowest 90%); lvspec-pst without protected tokens; fly (K 15); the random-relaxation
control (loose positions drawn at random at rate λ, for the same λ grid); the LVSpec variants again
with the attention mass on visual positions computed at decode time in the verify pass as the
relevance scorer (tag ``[attn]``; the middle layer and the token row unless ``--attention-layer`` /
``--attention-row`` or an ``--auc`` file of offline scorer AUCs say otherwise) and, given ``--probe
FILE`` (a linear relevance probe in safetensors, with its layer in the metadata), with that probe (tag
``[probe]``); sparrow (strict) and sparrow-lvspec-pst (each scorer). ``--scorers`` picks the relevance
scorers (default cosine,attention; add probe with a probe file).

Per method (the conventions of docs/algorithms.md, "Metrics"): τ (tokens per target pass, bonus included,
AR = 1.0), acceptance per draft position, fact-judge precision / recall / F1 (micro over claims and
facts) and retention = precision / AR precision on the same samples, share of outputs
token-identical to AR, MCQ accuracy (ar and each method on the same questions), decode speedup
(DSR: sum of AR decode seconds / sum of the method's; prefill excluded; one warm-up request per
method excluded) and ESR (wall clock incl. prefill), and the relevance share: seconds inside the
relevance scorer's ``score`` (timed separately) / decode seconds.

``--sweep`` runs instead the side by side of one draft VLM / target pair through ``vidspec eval`` (in process, the
models loaded once per input set): for every K of ``--k`` (e.g. ``4,6,8,12,16``) and every input set (``--data`` at
``--frames``, and ``--long-data`` at ``--long-frames``), ar, strict sd, lvspec under the paper's rule, lvspec-pst
(the paper's rule and PST), fly, and lvspec under the probability gate (named ``lvspec-prob``), every loose knob
given explicitly (:data:`PAPER`, :data:`PROB`) so that a change of the package defaults does not change the
figures; then the same on the MCQs (``synthvid_mcq``). It writes the tables (τ, DSR, ESR, fact-F1 and MCQ retention,
acceptance per draft position) to ``--out``, the per-position acceptance plot beside it (and to ``--img``), and the
eval records of the caption runs at the K of ``--records-k`` to ``--records`` files (gzip JSONL, one per input set;
``method`` as in the tables, ``input_set``, ``setting`` and ``sweep_k`` added: AR's records carry ``k`` 0), which a
projection to other model costs replays.
``--contrast-draft`` runs a second draft at ``--contrast-k`` the same way. The eval run folders (``--runs``) make it
resumable: the same command continues where a killed one stopped.

Usage::

    .venv/bin/python benchmarks/loose_ablation.py     # ~5 min on 2 CPU cores
    .venv/bin/python benchmarks/loose_ablation.py --sweep --k 4,8 --limit 2 --mcq-limit 2 --out runs/pair_smoke.json
    .venv/bin/python benchmarks/loose_ablation.py --scorers attention --limit 2 --mcq-limit 2 --out runs/loose_ablation_smoke.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from vidspec.evaluation.runner import git_info, machine_info
from vidspec.evaluation.testbed.figures import caption_rows

LAMS = (0.3, 0.5, 0.7, 0.9)
#: --sweep: LVSpec's own rule (λ 0.7 of the draft positions, the least visually relevant by the top-10 cosine score of
#: the middle layer, are loose, and every loose mismatch passes), with vidspec's strict negations and numbers
#: (protect) and PST's window of 3; each knob named, so that the package's defaults do not decide. Every round drafts
#: K tokens (adaptive off: vidspec's adaptive policy would shrink K per request where acceptance is low, so a K of the
#: sweep would not be the K that ran, and the records' per-position counts would mix draft lengths).
PAPER = {"lam": 0.7, "predicate": "always", "eps": 0.01, "top_k": 5, "top_n": 10, "scorer": "cosine",
         "relevance_layer": None, "pst_window": 3, "protect": True, "engine": "eager", "adaptive": False}
#: --sweep: the probability gate (every position loose, a mismatch kept where the target gives the draft's token
#: probability >= eps; the relevance score then decides nothing), as `vidspec demo` ran it.
PROB = {**PAPER, "lam": 1.0, "predicate": "prob", "eps": 0.3}
#: --sweep: (setting, eval methods, decode knobs, how each method is named in the tables)
SETTINGS = (("paper", ("sd", "lvspec", "lvspec-pst", "fly"), PAPER, {}),
            ("prob", ("lvspec",), PROB, {"lvspec": "lvspec-prob"}))
#: --sweep: what the LVSpec paper reports for its Qwen2.5-VL-32B pair (greedy; docs/algorithms.md), for the docs
PAPER_FIGURES = {"lvspec_speedup_qwen32b": 2.70, "lvspec_speedup_llava_ov_72b": 2.94, "lvspec_tau": 7.76,
                 "strict_sd_tau": 3.28, "retention": 0.998}
SCORERS = ("cosine", "probe", "attention")
#: method-name tag of each scorer's LVSpec variants
TAGS = {"cosine": "", "probe": "[probe]", "attention": "[attn]"}


def best_attention(auc_json: str, num_layers: int) -> tuple[int, str, float | None]:
    """(relevance layer, score row, offline AUC) of the best ``attn`` scorer in an offline AUC file (``--auc``).

    The AUC file names the attention of decoder layer j ``attn|row|L{j+1}``, which is the
    adapters' ``relevance_layer`` j+1 (``HFVideoTarget.attention_layer``). Without the file:
    the middle layer and the token row (the adapters' defaults).
    """
    path = Path(auc_json)
    if path.is_file():
        summary = json.loads(path.read_text()).get("summary", [])
        attn = [r for r in summary if r.get("scorer") == "attn" and r.get("target", {}).get("best_key")]
        if attn:
            best = max(attn, key=lambda r: r["target"]["generated"])
            _, row, layer = best["target"]["best_key"].split("|")
            return int(layer.lstrip("L")), row, best["target"]["generated"]
    return num_layers // 2, "token", None


class TimedScorer:
    """Wraps a relevance scorer and accumulates the seconds spent in ``score``.

    The attention scorer's work happens in the target's verify pass (``HFVideoTarget.
    _attention_output``, timed by :func:`time_target_relevance`); that time is parked in
    :attr:`pending` and charged to the scorer that reads it (the next ``score`` call).
    """

    pending = [0.0]

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name = inner.name
        self.need = inner.need
        self.seconds = 0.0
        self.calls = 0

    def score(self, out, state):
        t = time.perf_counter()
        s = self.inner.score(out, state)
        self.seconds += time.perf_counter() - t + TimedScorer.pending[0]
        TimedScorer.pending[0] = 0.0
        self.calls += 1
        return s


def time_target_relevance(target) -> None:
    """Time the adapter's attention-mass computation (added to the next ``TimedScorer.score``)."""
    inner = target._attention_output

    def timed(*args, **kwargs):
        t = time.perf_counter()
        r = inner(*args, **kwargs)
        if r is not None:
            TimedScorer.pending[0] += time.perf_counter() - t
        return r

    target._attention_output = timed


def interp(x: float, xs: list[float], ys: list[float]) -> float | None:
    """Linear interpolation of y at x on a curve sorted by xs (None outside its range)."""
    pts = sorted(zip(xs, ys))
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return None


def _ints(text: str, flag: str) -> list[int]:
    """Positive integers of a comma-separated flag value; exits with one line on anything else."""
    try:
        vals = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        vals = []
    if not vals or min(vals) < 1:
        _bad_input(f"{flag} takes positive integers separated by commas, got {text!r}")
    return vals


def _bad_input(message: str) -> None:
    """Exit 2 with one line on stderr (bad input, as the other benchmarks and the CLI do)."""
    import sys

    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def count_parameters(release: str) -> int | None:
    """A release's parameter count from its manifest (None when it has none), tower and embeddings included."""
    manifest = Path(release) / "manifest.json"
    return json.loads(manifest.read_text()).get("parameters") if manifest.is_file() else None


def pair_row(m: dict, mcq: dict | None, ar_mcq: dict | None) -> dict:
    """One method's figures of a sweep cell from the caption and MCQ summaries of ``vidspec eval``."""
    acc = mcq.get("accuracy") if mcq else None
    ar_acc = ar_mcq.get("accuracy") if ar_mcq else None
    return {
        "tau": m["tau"], "dsr": m["dsr"], "esr": m["esr"], "f1": m["score"], "f1_retention": m["retention"],
        "fact_precision": m["fact_precision"], "fact_recall": m["fact_recall"],
        "mcq_accuracy": acc, "mcq_retention": acc / ar_acc if acc is not None and ar_acc else None,
        "acceptance_by_position": [round(x, 4) for x in m["acceptance_by_position"]],
        "token_identical_share": m["token_identical_share"], "loose_accepted": m["loose_accepted"],
        "shift_accepted": m["shift_accepted"], "mean_new_tokens": m["mean_new_tokens"], "n": m["n_samples"],
        "mcq_n": mcq.get("n_samples") if mcq else None,
        "draft_ms_per_round": m["draft_ms_per_round"], "verify_ms_per_round": m["verify_ms_per_round"],
    }


def sweep_cell(models, base: dict, k: int, run_dir: Path, reads, mcq_limit: int) -> tuple[dict, list[dict]]:
    """Every setting of :data:`SETTINGS` at one K on one input set, captions then MCQs (``vidspec eval`` runs in
    process, sharing ``models`` and the clips in ``reads``). Returns the table rows by method and the caption
    records (methods renamed as in the tables, ``setting`` added)."""
    from vidspec.evaluation.runner import EvalConfig, run_eval

    rows, records = {}, []
    for setting, methods, knobs, names in SETTINGS:
        out = {}
        for bench, limit in (("synthvid_captions", base["limit"]), ("synthvid_mcq", mcq_limit)):
            cfg = EvalConfig.from_flags(**{**base, "limit": limit}, benchmark=bench, methods=",".join(methods), k=k,
                                        out=str(run_dir / f"k{k}-{setting}-{bench}"), device="cpu",
                                        share_video=True, progress=False, **knobs)
            out[bench] = run_eval(cfg, models=models, reads=reads)["methods"]
        caps, mcqs = out["synthvid_captions"], out["synthvid_mcq"]
        for m in ("ar", *methods):
            if m == "ar" and setting != "paper":
                continue  # the AR of the first setting stands for it (greedy: the same tokens)
            rows[names.get(m, m)] = pair_row(caps[m], mcqs.get(m), mcqs.get("ar"))
        for line in (run_dir / f"k{k}-{setting}-synthvid_captions" / "records.jsonl").read_text().splitlines():
            r = json.loads(line)
            if r["method"] == "ar" and setting != "paper":
                continue
            r["method"], r["setting"], r["sweep_k"] = names.get(r["method"], r["method"]), setting, k
            records.append(r)
    return rows, records


def plot_acceptance(results: dict, k: int, path: Path) -> None:
    """Per-position acceptance by method at one K, one panel per input set."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = [s for s in results if str(k) in results[s]]
    fig, axes = plt.subplots(1, len(sets), figsize=(5.2 * len(sets), 3.8), squeeze=False, sharey=True)
    for ax, s in zip(axes[0], sets):
        for m, row in results[s][str(k)].items():
            acc = row["acceptance_by_position"]
            if acc:
                ax.plot(range(1, len(acc) + 1), acc, marker="o", ms=3, label=f"{m} (τ {row['tau']:.2f})")
        ax.set_title(f"{s} inputs, K = {k}")
        ax.set_xlabel("draft position")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("acceptance rate (rounds reaching the position)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def sweep(args) -> None:
    """``--sweep``: the pair's side by side over K and input lengths (module docstring)."""
    import gzip
    import shutil

    from vidspec.evaluation.runner import EvalConfig, SharedReads, load_models

    t_start = time.perf_counter()
    ks = _ints(args.k, "--k")
    records_k = set(_ints(args.records_k, "--records-k")) if args.records_k else set()
    sets = [("clip", args.data, args.frames)] + ([("long", args.long_data, args.long_frames)] if args.long_data else [])
    for name, data, _ in sets:
        if not Path(data).is_dir():
            _bad_input(f"no dataset folder {data} (the {name} input set; make it with vidspec data synthvid)")
    runs = Path(args.runs)
    results: dict = {}
    contrast: dict = {}
    seconds: dict = {}
    record_files = {}
    for name, data, frames in sets:
        t0 = time.perf_counter()
        base = dict(data=data, split=args.split, target=args.target, draft=args.draft, frames=frames,
                    max_new_tokens=args.max_new_tokens, limit=args.limit)
        probe = EvalConfig.from_flags(**base, benchmark="synthvid_captions", out=str(runs / "probe"),
                                      methods="sd", device="cpu")
        models = load_models(probe, frames)
        reads = SharedReads(True, keep_all=True)
        results[name], recs = {}, []
        for k in ks:
            results[name][str(k)], cell = sweep_cell(models, base, k, runs / name, reads, args.mcq_limit)
            recs += [{**r, "input_set": name} for r in cell if k in records_k]
            print(f"{name} K={k}: " + ", ".join(f"{m} τ {r['tau']:.2f} F1-ret {r['f1_retention'] or 0:.2f}"
                                                for m, r in results[name][str(k)].items()), flush=True)
        if recs and args.records:
            f = Path(f"{args.records}_{name}_cpu.jsonl.gz")
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(gzip.compress(("\n".join(json.dumps(r, ensure_ascii=False) for r in recs) + "\n").encode(),
                                        mtime=0))
            record_files[name] = {"path": str(f), "k": sorted(records_k & set(ks)), "records": len(recs),
                                  "bytes": f.stat().st_size}
        if args.contrast_draft:
            cmodels = load_models(EvalConfig.from_flags(**{**base, "draft": args.contrast_draft},
                                                        benchmark="synthvid_captions", out=str(runs / "probe"),
                                                        methods="sd", device="cpu"), frames)
            contrast[name], _ = sweep_cell(cmodels, {**base, "draft": args.contrast_draft}, args.contrast_k,
                                           runs / f"{name}-contrast", reads, args.mcq_limit)
        seconds[name] = time.perf_counter() - t0

    out = Path(args.out)
    img = out.with_name(out.stem + f"_acceptance_k{args.plot_k}.png")
    if str(args.plot_k) in next(iter(results.values())):
        plot_acceptance(results, args.plot_k, img)
        if args.img:
            Path(args.img).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(img, args.img)
    tp, dp = count_parameters(args.target), count_parameters(args.draft)
    report = {
        "benchmark": "lvspec_pair",
        "command": "python benchmarks/loose_ablation.py --sweep " + " ".join(
            f"--{k_.replace('_', '-')} {v}" for k_, v in vars(args).items() if k_ != "sweep" and v not in (None, "")),
        "machine": machine_info(), "git": git_info(),
        "target": {"path": args.target, "parameters": tp},
        "draft": {"path": args.draft, "parameters": dp, "share_of_target": dp / tp if dp and tp else None},
        "contrast_draft": {"path": args.contrast_draft, "k": args.contrast_k,
                           "parameters": count_parameters(args.contrast_draft)} if args.contrast_draft else None,
        "input_sets": {n: {"data": d, "frames": f, "split": args.split} for n, d, f in sets},
        "captions_limit": args.limit, "mcq_limit": args.mcq_limit, "max_new_tokens": args.max_new_tokens,
        "k": ks, "greedy": True, "batch": 1, "device": "cpu",
        "settings": {s: {"methods": [names.get(m, m) for m in methods], "decode": knobs}
                     for s, methods, knobs, names in SETTINGS},
        "conventions": "vidspec eval's: tau incl. bonus (AR = 1); DSR = AR decode s / method decode s, prefill "
                       "excluded, AR of the same run; ESR incl. prefill; f1_retention = fact F1 / AR's on the same "
                       "captions; mcq_retention = MCQ accuracy / AR's; acceptance_by_position[i] = share of rounds "
                       "whose draft position i+1 was accepted, of the rounds that drafted it. CPU timings of a "
                       "shared 2-core machine: DSR and ESR are noisy",
        "paper_figures": PAPER_FIGURES,
        "results": results, "contrast": contrast, "records": record_files,
        "plot": str(img), "seconds": {**seconds, "total": time.perf_counter() - t_start},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {out} (plot {img}) in {report['seconds']['total']:.0f} s")


def main() -> None:
    from datasets import load_from_disk
    from safetensors import safe_open

    from vidspec.decoding.drafters import ModelDrafter
    from vidspec.decoding.loops.chain import SpeculativeDecoder
    from vidspec.decoding.methods import build_decoder
    from vidspec.decoding.models import load_target
    from vidspec.decoding.types import Request
    from vidspec.decoding.verifiers.factory import build_verifier
    from vidspec.evaluation.synthvid.judge import judge_caption
    from vidspec.evaluation.synthvid.mcq import extract_choice
    from vidspec.evaluation.synthvid.questions import mcq_prompt

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data/cache/synthvid-heldout")
    ap.add_argument("--target", default="data/releases/synthvid-target")
    ap.add_argument("--draft", default="data/releases/synthvid-draft")
    ap.add_argument("--sparrow", default="data/releases/sparrow-synthvid")
    ap.add_argument("--probe", default=None, help="linear relevance probe (safetensors) for the probe scorer")
    ap.add_argument("--split", default="validation")
    ap.add_argument("--style", default="alpha", help="caption rows of this style (the target's); one per video")
    ap.add_argument("--limit", type=int, default=30, help="caption prompts")
    ap.add_argument("--mcq-limit", type=int, default=30)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--mcq-new-tokens", type=int, default=8)
    ap.add_argument("--k", default="4", help="draft tokens per round; --sweep: a comma-separated list")
    ap.add_argument("--sweep", action="store_true", help="the pair's side by side over K and input lengths")
    ap.add_argument("--frames", type=int, default=8, help="--sweep: frames of the clip-length set")
    ap.add_argument("--long-data", default="", help="--sweep: the long-input set (SynthVid, e.g. --frames 64)")
    ap.add_argument("--long-frames", type=int, default=64)
    ap.add_argument("--contrast-draft", default="", help="--sweep: a second draft VLM, run at --contrast-k")
    ap.add_argument("--contrast-k", type=int, default=8)
    ap.add_argument("--records-k", default="8,16", help="--sweep: K whose caption records go to --records")
    ap.add_argument("--records", default="", help="--sweep: records file prefix (PREFIX_<set>_cpu.jsonl.gz)")
    ap.add_argument("--runs", default="runs/lvspec_pair", help="--sweep: eval run folders (resumable)")
    ap.add_argument("--plot-k", type=int, default=16)
    ap.add_argument("--img", default="", help="--sweep: copy the plot here too")
    ap.add_argument("--scorers", default="cosine,attention",
                    help=f"comma-separated relevance scorers of the LVSpec variants ({', '.join(SCORERS)})")
    ap.add_argument("--auc", default="",
                    help="JSON of offline relevance-scorer AUCs (a 'summary' list with attn 'best_key' entries): "
                    "the attention scorer's layer and row default to its best one")
    ap.add_argument("--attention-layer", type=int, default=None,
                    help="attention scorer: hidden-state index whose producing layer's attention is read "
                         "(default: best attn layer of --auc, else the middle layer)")
    ap.add_argument("--attention-row", choices=("token", "predictor"), default=None,
                    help="attention scorer: which row judges d_i (default: best attn row of --auc, else token)")
    ap.add_argument("--attention-heads", choices=("mean", "max"), default="mean")
    ap.add_argument("--out", default="benchmarks/results/loose_ablation.json")
    args = ap.parse_args()
    if args.sweep:
        sweep(args)
        return
    args.k = _ints(args.k, "--k")[0]
    scorers = [x.strip() for x in args.scorers.split(",") if x.strip()]
    unknown = sorted(set(scorers) - set(SCORERS))
    if unknown or not scorers:
        ap.error(f"--scorers: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(SCORERS)}")
    t_start = time.perf_counter()
    data = Path(args.data)

    target = load_target(args.target, device="cpu")  # relevance layer: the middle one (cosine)
    draft = load_target(args.draft, device="cpu")
    tok = target.tokenizer
    probe_meta = {}
    target_p = None
    if "probe" in scorers and args.probe and Path(args.probe).is_file():
        with safe_open(args.probe, framework="pt") as f:
            probe_meta = dict(f.metadata() or {})
        layer = int(probe_meta.get("layer", target.relevance_layer))
        target_p = target if layer == target.relevance_layer else load_target(
            args.target, device="cpu", relevance_layer=layer)
    elif "probe" in scorers:
        print(f"no probe file ({args.probe}): probe variants skipped")
    target_a, attn_meta, aopt = None, None, {}
    if "attention" in scorers:
        a_layer, a_row, a_auc = best_attention(args.auc, target.num_layers)
        a_layer = a_layer if args.attention_layer is None else args.attention_layer
        a_row = a_row if args.attention_row is None else args.attention_row
        target_a = target if a_layer == target.relevance_layer else load_target(
            args.target, device="cpu", relevance_layer=a_layer)
        aopt = {"scorer": "attention", "attention_heads": args.attention_heads, "score_row": a_row}
        time_target_relevance(target_a)
        attn_meta = {"relevance_layer": a_layer, "decoder_layer": target_a.attention_layer, "row": a_row,
                     "heads": args.attention_heads, "offline_auc_generated": a_auc, "auc_file": args.auc}

    decs: dict[str, SpeculativeDecoder] = {}
    decs["ar"] = build_decoder("ar", target=target)
    decs["sd"] = build_decoder("sd", target=target, draft=draft, k=args.k)
    if "cosine" in scorers:
        for lam in LAMS:
            decs[f"lvspec λ={lam}"] = build_decoder("lvspec", target=target, draft=draft, k=args.k,
                                                   loose={"lam": lam})
        decs["lvspec-pst λ=0.7"] = build_decoder("lvspec-pst", target=target, draft=draft, k=args.k,
                                                 loose={"lam": 0.7})
        decs["lvspec-pst λ=0.7 no-protect"] = build_decoder("lvspec-pst", target=target, draft=draft, k=args.k,
                                                            loose={"lam": 0.7, "protect": False})
    decs["fly"] = build_decoder("fly", target=target, draft=draft)
    for lam in LAMS:
        v = build_verifier("random", rate=lam, tokenizer=tok)
        decs[f"random rate={lam}"] = SpeculativeDecoder(target, ModelDrafter(draft), v, k=args.k, method="random")
    def add_scorer(tag: str, tgt, opts: dict) -> None:
        """lvspec at every λ, lvspec-pst at 0.7 with and without protection, for one relevance scorer."""
        for lam in LAMS:
            decs[f"lvspec[{tag}] λ={lam}"] = build_decoder("lvspec", target=tgt, draft=draft, k=args.k,
                                                         loose={"lam": lam, **opts})
        for protect, suffix in ((True, ""), (False, " no-protect")):
            decs[f"lvspec-pst[{tag}] λ=0.7{suffix}"] = build_decoder(
                "lvspec-pst", target=tgt, draft=draft, k=args.k, loose={"lam": 0.7, "protect": protect, **opts})

    popt = {"scorer": "probe", "probe_path": args.probe, "score_row": probe_meta.get("score_row", "token")}
    if target_p is not None:
        add_scorer("probe", target_p, popt)
    if target_a is not None:  # attention mass, computed by the target in each verify pass
        add_scorer("attn", target_a, aopt)
    decs["sparrow"] = build_decoder("sparrow", target=target, draft=args.sparrow, k=args.k)
    if "cosine" in scorers:
        decs["sparrow-lvspec-pst λ=0.7"] = build_decoder("sparrow-lvspec-pst", target=target, draft=args.sparrow,
                                                         k=args.k, loose={"lam": 0.7})
    if target_p is not None:
        decs["sparrow-lvspec-pst[probe] λ=0.7"] = build_decoder(
            "sparrow-lvspec-pst", target=target_p, draft=args.sparrow, k=args.k, loose={"lam": 0.7, **popt})
    if target_a is not None:
        decs["sparrow-lvspec-pst[attn] λ=0.7"] = build_decoder(
            "sparrow-lvspec-pst", target=target_a, draft=args.sparrow, k=args.k, loose={"lam": 0.7, **aopt})
    timers: dict[str, TimedScorer] = {}
    for name, d in decs.items():
        if hasattr(d.verifier, "scorer"):
            d.verifier.scorer = timers[name] = TimedScorer(d.verifier.scorer)

    rows = caption_rows(data, args.split, args.limit, style=args.style)
    mcqs = load_from_disk(str(data / "mcq"))[args.split]
    mcqs = mcqs.select(range(min(args.mcq_limit, len(mcqs))))

    # warm-up: one request per method, excluded from every figure
    warm = Request(prompt=rows[0]["question"], clip=target.read_video(str(data / rows[0]["video"])))
    for d in decs.values():
        d.generate(warm, max_new_tokens=16)
    for t in timers.values():
        t.seconds, t.calls = 0.0, 0

    acc = {n: {"emitted": 0, "passes": 0, "claims": 0, "true": 0, "found": 0, "facts": 0, "identical": 0,
               "decode_s": 0.0, "wall_s": 0.0, "loose": 0, "shift": 0, "tokens": 0, "pos": [0] * 16,
               "pos_n": [0] * 16, "mcq": 0} for n in decs}
    examples = []
    for i, r in enumerate(rows):
        req = Request(prompt=r["question"], clip=target.read_video(str(data / r["video"])))
        facts = json.loads(r["facts"])
        ar_ids = None
        ex = {"reference": r["answer"]}
        for name, d in decs.items():
            res = d.generate(req, max_new_tokens=args.max_new_tokens)
            a = acc[name]
            if name == "ar":
                ar_ids = res.token_ids
            a["identical"] += int(res.token_ids == ar_ids)
            a["emitted"] += sum(s.emitted for s in res.steps)
            a["passes"] += len(res.steps)
            a["decode_s"] += res.timings.decode_s
            a["wall_s"] += res.timings.wall_s
            a["loose"] += res.loose_accepted
            a["shift"] += res.shift_accepted
            a["tokens"] += res.num_new_tokens
            for s in res.steps:
                for p in range(min(s.drafted, 16)):
                    a["pos_n"][p] += 1
                    a["pos"][p] += int(s.accepted > p)
            j = judge_caption(res.text, facts)
            a["claims"] += len(j.claims)
            a["true"] += sum(c.true for c in j.claims)
            a["found"] += sum(j.facts_found.values())
            a["facts"] += sum(j.facts_total.values())
            if i < 3 and name in ("ar", "lvspec-pst λ=0.7", "fly", "random rate=0.7", "lvspec-pst[probe] λ=0.7",
                                  "lvspec-pst[attn] λ=0.7"):
                ex[name] = res.text
        if i < 3:
            examples.append(ex)
    t_captions = time.perf_counter() - t_start

    mcq_ar_answers = []
    for q in mcqs:
        req = Request(prompt=mcq_prompt(q["question"], q["options"]), clip=target.read_video(str(data / q["video"])))
        for name, d in decs.items():
            text = d.generate(req, max_new_tokens=args.mcq_new_tokens).text
            acc[name]["mcq"] += int(extract_choice(text, options=q["options"]) == q["answer"])
            if name == "ar" and len(mcq_ar_answers) < 3:
                mcq_ar_answers.append(text)

    ar = acc["ar"]
    ar_prec = ar["true"] / ar["claims"] if ar["claims"] else None
    results = {}
    for name, a in acc.items():
        prec = a["true"] / a["claims"] if a["claims"] else None
        rec = a["found"] / a["facts"] if a["facts"] else None
        f1 = 2 * prec * rec / (prec + rec) if prec and rec else 0.0
        t = timers.get(name)
        results[name] = {
            "tau": a["emitted"] / a["passes"] if a["passes"] else None,
            "acceptance_by_position": [round(a["pos"][p] / a["pos_n"][p], 4) for p in range(16) if a["pos_n"][p]],
            "precision": prec, "recall": rec, "f1": f1,
            "retention_precision": prec / ar_prec if prec is not None and ar_prec else None,
            "claims": a["claims"], "identical_to_ar": a["identical"] / len(rows),
            "loose_accepted_share": a["loose"] / a["tokens"], "shift_accepted_share": a["shift"] / a["tokens"],
            "mcq_accuracy": a["mcq"] / len(mcqs),
            "dsr": ar["decode_s"] / a["decode_s"] if a["decode_s"] else None,
            "esr": ar["wall_s"] / a["wall_s"] if a["wall_s"] else None,
            "decode_s": a["decode_s"],
            "relevance_s": t.seconds if t else 0.0,
            "relevance_share_of_decode": (t.seconds / a["decode_s"]) if t and a["decode_s"] else None,
            "relevance_calls": t.calls if t else 0,
        }

    # ---- targets ----
    sd_tau = results["sd"]["tau"]
    checks = {}
    for key in ("lvspec-pst λ=0.7", "lvspec-pst[probe] λ=0.7", "lvspec-pst[attn] λ=0.7"):
        if key in results:
            r_ = results[key]
            checks[f"{key}: precision >= 99.5% of AR"] = {
                "value": r_["retention_precision"], "met": (r_["retention_precision"] or 0) >= 0.995}
            checks[f"{key}: tau >= 2x strict sd"] = {"value": r_["tau"] / sd_tau, "met": r_["tau"] >= 2 * sd_tau}
    for scorer_tag in TAGS.values():
        names = ["sd"] + [f"lvspec{scorer_tag} λ={lam}" for lam in LAMS]
        if not all(n in results for n in names):
            continue
        xs = [results[n]["tau"] for n in names]
        ys = [results[n]["precision"] for n in names]
        for other in ["fly"] + [f"random rate={lam}" for lam in LAMS]:
            o = results[other]
            lv = interp(o["tau"], xs, ys)
            checks[f"lvspec{scorer_tag} precision at {other}'s tau ({o['tau']:.2f}) > {other}'s"] = {
                "lvspec_precision_interp": lv, "other_precision": o["precision"],
                "met": None if lv is None else lv > o["precision"],
                "note": None if lv is not None else "tau outside lvspec's tau range: no equal-tau point"}
    shares = {n: r_["relevance_share_of_decode"] for n, r_ in results.items() if r_["relevance_share_of_decode"]}
    checks["relevance cost < 1% of decode time (every LVSpec method)"] = {
        "max_share": max(shares.values()) if shares else None,
        "met": bool(shares) and max(shares.values()) < 0.01}

    report = {
        "benchmark": "loose_ablation",
        "command": "python benchmarks/loose_ablation.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()),
        "machine": machine_info(), "git": git_info(),
        "data": str(data), "split": args.split, "style": args.style, "captions": len(rows), "mcqs": len(mcqs),
        "k": args.k, "max_new_tokens": args.max_new_tokens, "greedy": True, "batch": 1,
        "scorers": scorers,
        "probe": {"path": args.probe, **probe_meta} if target_p is not None else None,
        "attention": attn_meta,
        "conventions": "tau incl. bonus (AR=1); DSR = AR decode s / method decode s (prefill excluded); ESR = wall "
                       "incl. prefill; retention = precision / AR precision on the same samples; relevance share = "
                       "seconds in scorer.score (attention: + the target's attention-mass computation) / decode seconds",
        "methods": results, "targets": checks, "examples": examples, "mcq_ar_examples": mcq_ar_answers,
        "seconds": {"captions": t_captions, "total": time.perf_counter() - t_start},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")

    print(f"{len(rows)} captions, {len(mcqs)} MCQs, K={args.k}, greedy, CPU {machine_info()['cpu_count']} cores")
    hdr = (f"{'method':36s} {'tau':>5s} {'prec':>6s} {'rec':>6s} {'F1':>6s} {'retain':>6s} {'ident':>5s} "
           f"{'loose%':>6s} {'shift%':>6s} {'MCQ':>5s} {'DSR':>5s} {'ESR':>5s} {'rel%':>6s}")
    print(hdr)
    for name, r_ in results.items():
        rel = f"{100 * r_['relevance_share_of_decode']:.2f}" if r_["relevance_share_of_decode"] else "-"
        print(f"{name:36s} {r_['tau']:5.2f} {r_['precision'] or 0:6.3f} {r_['recall'] or 0:6.3f} {r_['f1']:6.3f} "
              f"{r_['retention_precision'] or 0:6.3f} {r_['identical_to_ar']:5.2f} "
              f"{100 * r_['loose_accepted_share']:6.1f} {100 * r_['shift_accepted_share']:6.1f} "
              f"{r_['mcq_accuracy']:5.2f} {r_['dsr'] or 0:5.2f} {r_['esr'] or 0:5.2f} {rel:>6s}")
    print("targets:")
    for k_, v in checks.items():
        print(f"  [{'MET' if v['met'] else ('n/a' if v['met'] is None else 'MISSED')}] {k_}: "
              + ", ".join(f"{a}={b:.4f}" if isinstance(b, float) else f"{a}={b}" for a, b in v.items() if a != "met"))
    print(f"wrote {args.out} in {report['seconds']['total']:.0f} s")


if __name__ == "__main__":
    main()
