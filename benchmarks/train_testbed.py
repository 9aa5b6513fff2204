"""Figures of trained SynthVid testbed models: fact-judge precision/recall, MCQ accuracy, draft τ.

Reads releases written by ``vidspec export`` and a SynthVid dataset; prints one JSON object (and
writes it with ``--out``). Greedy decoding, batch 1, on the device given.

Usage::

    python benchmarks/train_testbed.py --data data/cache/synthvid-cpu --target runs/releases/synthvid-target-cpu \\
        --draft runs/releases/synthvid-draft-cpu --limit 32 --out benchmarks/results/train_testbed_cpu.json

Figures (ALGORITHMS.md section 5 conventions):
  captions.precision / recall     fact judge over the target's greedy captions (micro-averaged claims)
  captions.per_category           precision per visual category (colour, shape, motion, ...)
  captions.hallucinated           every caption with a false claim: its video, reference, text and the claims
  mcq.accuracy                    option letter extracted from the target's answer
  *_ci95                          Wilson 95% intervals of precision (over claims) and MCQ accuracy
  captions.precision_bootstrap    the precision's 95% interval over captions (resampled with their claims, which
                                  Wilson's counts as independent) and the share of draws at or above each bar
  captions.per_caption            [true claims, claims] of each caption, in order, so it can be reread
  draft.tau                       strict speculative decoding with the draft, K = 4 (bonus included)
  draft.disagreement              teacher-forced on the target's captions: share of positions where the
                                  draft's greedy token differs, split into filler and visual tokens
  grounding.teacher_forced        the target's greedy next token on the *reference* captions of its
                                  own caption style, accuracy per word category (colour, shape,
                                  motion, ..., filler): does it know the attribute once the
                                  template reaches it?
  mcq.by_type                     MCQ accuracy per question type (colour, shape, motion, count, ...), and
                                  the letters answered (a model that has not learnt a type answers by
                                  position: one or two letters take most of its answers)
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from testbed_common import bootstrap_ratio_of_sums, caption_rows, emit_json  # noqa: E402

#: issue 4's precision bars: the release-size target's and the GPU-scale target's
PRECISION_BARS = (0.95, 0.98)


def wilson(k: int, n: int, z: float = 1.96) -> list[float] | None:
    """Wilson's 95% interval of a proportion ``k / n`` (None for n = 0): how far a bar on a few dozen samples is
    from settled. For caption precision the claims are counted as independent, which claims of one caption are
    not, so that interval is a lower bound on the uncertainty."""
    if n == 0:
        return None
    p, d = k / n, 1 + z * z / n
    centre, half = (p + z * z / (2 * n)) / d, z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return [centre - half, centre + half]


def caption_bootstrap(per_caption: list[list[int]], draws: int = 10_000, seed: int = 0) -> dict | None:
    """Precision's bootstrap over captions (``per_caption``: [true claims, claims] of each), with the share of draws
    at or above each of issue 4's bars; None when no caption made a claim. Claims of one caption share its errors (a
    wrong motion can be said twice), and this interval does not take them as independent, as Wilson's over claims
    does."""
    made = [(k, n) for k, n in per_caption if n]  # a caption without claims adds nothing to either sum
    if not made:
        return None
    return bootstrap_ratio_of_sums([k for k, _ in made], [n for _, n in made], bars=PRECISION_BARS, draws=draws,
                                   seed=seed)


def _metrics(release: Path) -> dict:
    m = json.loads((release / "manifest.json").read_text()) if (release / "manifest.json").is_file() else {}
    return {"metrics": m.get("metrics"), "parameters": m.get("parameters"), "layers": m.get("layers"),
            "fingerprint": m.get("fingerprint")}


@torch.inference_mode()
def _draft_disagreement(target, draft, request, token_ids: list[int], labels: list[str]) -> dict[str, list[int]]:
    """Teacher-forced: does the draft's greedy next token equal the target's, per caption position?"""
    state = draft.prefill(request)
    out = {"filler": [0, 0], "visual": [0, 0]}
    preds = [int(state.first_logits.argmax())]
    if len(token_ids) > 1:
        v = draft.verify(state, token_ids[:-1])
        preds += v.logits.argmax(-1).tolist()
    for p, t, lab in zip(preds, token_ids, labels):
        if lab == "special":
            continue
        kind = "filler" if lab == "filler" else "visual"
        out[kind][0] += int(p != t)
        out[kind][1] += 1
    return out


@torch.inference_mode()
def _teacher_forced(target, request, token_ids: list[int], labels: list[str]) -> dict[str, list[int]]:
    """Per label: [right, total] of the target's greedy next token along a reference caption."""
    state = target.prefill(request)
    preds = [int(state.first_logits.argmax())]
    if len(token_ids) > 1:
        preds += target.verify(state, token_ids[:-1]).logits.argmax(-1).tolist()
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for p, t, lab in zip(preds, token_ids, labels):
        if lab != "special":
            out[lab][0] += int(p == t)
            out[lab][1] += 1
    return out


def main() -> None:
    from datasets import load_from_disk

    from vidspec.decoding.methods import build_decoder
    from vidspec.decoding.models import load_target
    from vidspec.decoding.types import Request
    from vidspec.evaluation.synthvid.judge import judge_caption
    from vidspec.evaluation.synthvid.mcq import extract_choice
    from vidspec.evaluation.synthvid.questions import mcq_prompt
    from vidspec.evaluation.synthvid.tokenizer import token_labels

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", default=None)
    ap.add_argument("--sparrow", default=None, help="a Sparrow release: its strict tau is measured too")
    ap.add_argument("--split", default="validation")
    ap.add_argument("--limit", type=int, default=32, help="videos (captions) and MCQs evaluated")
    ap.add_argument("--mcq-limit", type=int, default=None,
                    help="MCQs evaluated, when more (or fewer) than --limit: a question costs one short greedy "
                         "answer, a caption several decoding passes, so the MCQ can afford a tighter interval")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    data = Path(args.data)
    target = load_target(args.target, device=args.device)
    draft = load_target(args.draft, device=args.device) if args.draft else None
    ar = build_decoder("ar", target=target)
    sd = build_decoder("sd", target=target, draft=draft, k=args.k) if draft else None
    sp = build_decoder("sparrow", target=target, draft=args.sparrow, k=args.k) if args.sparrow else None
    sp_emitted = sp_passes = 0
    sp_lossless = True

    captions = load_from_disk(str(data))[args.split]
    rows = caption_rows(data, args.split, args.limit)
    styles = (json.loads((Path(args.target) / "manifest.json").read_text()).get("caption_styles")
              if (Path(args.target) / "manifest.json").is_file() else None)
    tf: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    n_tf = 0
    for r in captions:
        if n_tf >= args.limit:
            break
        if styles and r["style"] not in styles:
            continue
        ids = target.tokenizer(r["answer"], add_special_tokens=False)["input_ids"] + list(target.eos_token_ids)[:1]
        request = Request(prompt=r["question"], clip=target.read_video(str(data / r["video"])))
        for lab, (ok, n) in _teacher_forced(target, request, ids, token_labels(ids, target.tokenizer)).items():
            tf[lab][0] += ok
            tf[lab][1] += n
        n_tf += 1
    claims_true = claims = found = total = 0
    per_cat: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    dis = {"filler": [0, 0], "visual": [0, 0]}
    emitted = passes = 0
    lossless = True
    examples, hallucinated, per_caption = [], [], []
    t0 = time.perf_counter()
    for r in rows:
        video = str(data / r["video"])
        request = Request(prompt=r["question"], clip=target.read_video(video))
        res = ar.generate(request, max_new_tokens=args.max_new_tokens)
        j = judge_caption(res.text, json.loads(r["facts"]))
        per_caption.append([sum(c.true for c in j.claims), len(j.claims)])
        claims_true += per_caption[-1][0]
        claims += per_caption[-1][1]
        found += sum(j.facts_found.values())
        total += sum(j.facts_total.values())
        for cat, v in j.per_category().items():
            per_cat[cat][0] += int(v["claims"]) - int(v["hallucinations"])
            per_cat[cat][1] += int(v["claims"])
        if len(examples) < 3:
            examples.append({"reference": r["answer"], "generated": res.text, "precision": j.precision})
        if j.hallucinations:  # every caption with a false claim, so a precision figure can be read claim by claim
            hallucinated.append({"video": r["video"], "reference": r["answer"], "generated": res.text,
                                 "false_claims": [{"category": c.category, "text": c.text} for c in j.hallucinations]})
        if draft is not None:
            s = sd.generate(request, max_new_tokens=args.max_new_tokens)
            lossless &= s.token_ids == res.token_ids
            emitted += sum(st.emitted for st in s.steps)
            passes += len(s.steps)
            d = _draft_disagreement(target, draft, request, list(res.token_ids),
                                    token_labels(res.token_ids, target.tokenizer))
            for k in dis:
                dis[k][0] += d[k][0]
                dis[k][1] += d[k][1]
        if sp is not None:
            s = sp.generate(request, max_new_tokens=args.max_new_tokens)
            sp_lossless &= s.token_ids == res.token_ids
            sp_emitted += sum(st.emitted for st in s.steps)
            sp_passes += len(s.steps)
    caption_s = time.perf_counter() - t0

    mcq = load_from_disk(str(data / "mcq"))[args.split]
    correct = n_mcq = 0
    by_type: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    chosen: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))  # type -> letter answered -> count
    n_questions = args.limit if args.mcq_limit is None else args.mcq_limit
    for r in mcq.select(range(min(n_questions, len(mcq)))):
        request = Request(prompt=mcq_prompt(r["question"], r["options"]),
                          clip=target.read_video(str(data / r["video"])))
        text = ar.generate(request, max_new_tokens=4).text
        choice = extract_choice(text, options=r["options"])
        ok = int(choice == r["answer"])
        kind = r.get("task_type") or "?"
        chosen[kind][choice or "none"] += 1
        correct += ok
        n_mcq += 1
        by_type[kind][0] += ok
        by_type[kind][1] += 1

    report = {
        "data": str(data), "split": args.split, "device": args.device, "machine": platform.machine(),
        "target": {"path": args.target, **_metrics(Path(args.target))},
        "captions": {
            "videos": len(rows), "precision": claims_true / claims if claims else None,
            "claims": claims, "precision_ci95": wilson(claims_true, claims),
            "precision_bootstrap": caption_bootstrap(per_caption),
            "recall": found / total if total else None,
            "per_category": {c: (t / n if n else None) for c, (t, n) in sorted(per_cat.items())},
            "seconds_per_caption": caption_s / max(1, len(rows)), "examples": examples,
            "hallucinated": hallucinated, "per_caption": per_caption,
        },
        "mcq": {"questions": n_mcq, "accuracy": correct / n_mcq if n_mcq else None,
                "accuracy_ci95": wilson(correct, n_mcq),
                "by_type": {t: {"accuracy": ok / n, "questions": n, "answered": dict(sorted(chosen[t].items()))}
                            for t, (ok, n) in sorted(by_type.items())}},
        "grounding": {"captions": n_tf, "styles": styles,
                      "teacher_forced": {lab: {"accuracy": ok / n, "tokens": n} for lab, (ok, n) in sorted(tf.items())}},
    }
    if draft is not None:
        report["draft"] = {
            "path": args.draft, **_metrics(Path(args.draft)), "k": args.k,
            "tau": emitted / passes if passes else None, "lossless": lossless,
            "disagreement": {k: (v[0] / v[1] if v[1] else None) for k, v in dis.items()},
            "positions": {k: v[1] for k, v in dis.items()},
        }
    if sp is not None:
        report["sparrow"] = {"path": args.sparrow, "k": args.k, "lossless": sp_lossless,
                             "tau": sp_emitted / sp_passes if sp_passes else None}
    emit_json(report, args.out)


if __name__ == "__main__":
    main()
