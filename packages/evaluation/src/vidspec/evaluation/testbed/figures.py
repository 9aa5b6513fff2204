"""Figures of trained SynthVid testbed releases: fact-judge precision/recall, MCQ accuracy, draft tau.

:func:`measure_testbed` reads releases written by ``vidspec export`` and a SynthVid dataset, decodes greedily at
batch 1 and returns one JSON-ready report (the last stage of ``vidspec testbed build`` writes it as
``figures.json``). Its keys:

  captions.precision / recall     fact judge over the target's greedy captions (micro-averaged claims)
  captions.per_category           precision per visual category (colour, shape, motion, ...)
  captions.hallucinated           every caption with a false claim: its video, reference, text and the claims
  captions.precision_bootstrap    the precision's 95% interval over captions (resampled with their claims, which
                                  Wilson's interval counts as independent) and the share of draws at or above
                                  each of :data:`PRECISION_BARS`
  captions.per_caption            [true claims, claims] of each caption, in order, so it can be reread
  mcq.accuracy, mcq.by_type       the option letter extracted from the target's answer, overall and per question
                                  type with the letters answered (a model that has not learnt a type answers by
                                  position: one or two letters take most of its answers)
  *_ci95                          Wilson 95% intervals of precision (over claims) and MCQ accuracy
  grounding.teacher_forced        the target's greedy next token along the reference captions of its own style,
                                  accuracy per word category: does it know the attribute once the template
                                  reaches it?
  draft.tau, draft.disagreement   a draft VLM: strict speculative decoding with it (K tokens a round, bonus
                                  included), and teacher-forced on the target's captions the share of positions
                                  where its greedy token differs, split into filler and visual tokens
  sparrow.tau                     the same strict tau with a Sparrow draft
"""

from __future__ import annotations

import json
import math
import platform
import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

#: The caption-precision bars the testbed targets are held to: 0.95 for the release-size target, 0.98 for the
#: GPU-scale one.
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


def bootstrap_ratio_of_sums(num: list[float], den: list[float], bars: tuple[float, ...] = (), draws: int = 10_000,
                            seed: int = 0) -> dict[str, Any]:
    """Bootstrap over units (captions) of ``sum(num) / sum(den)``, unit ``i`` adding ``num[i]`` and ``den[i]``.

    Units are resampled with replacement, so what is correlated within a unit (the claims of one caption) moves
    together. Returns the 95% percentile interval and, per bar, the share of draws at or above it.
    """
    rng = random.Random(seed)
    n = len(num)
    ratios = []
    for _ in range(draws):
        idx = [rng.randrange(n) for _ in range(n)]
        ratios.append(sum(num[i] for i in idx) / sum(den[i] for i in idx))
    ratios.sort()
    return {"units": n, "draws": draws, "seed": seed,
            "ci95": [ratios[int(0.025 * draws)], ratios[int(0.975 * draws) - 1]],
            "share_at_or_above": {str(b): sum(r >= b for r in ratios) / draws for b in bars}}


def caption_bootstrap(per_caption: list[list[int]], draws: int = 10_000, seed: int = 0) -> dict[str, Any] | None:
    """Precision's bootstrap over captions (``per_caption``: [true claims, claims] of each), with the share of draws
    at or above each of :data:`PRECISION_BARS`; None when no caption made a claim."""
    made = [(k, n) for k, n in per_caption if n]  # a caption without claims adds nothing to either sum
    if not made:
        return None
    return bootstrap_ratio_of_sums([k for k, _ in made], [n for _, n in made], bars=PRECISION_BARS, draws=draws,
                                   seed=seed)


def caption_rows(data: str | Path, split: str, limit: int, style: str | None = None) -> list[dict]:
    """The first caption row of each video (of ``style``, if given) in ``split``, for up to ``limit`` videos."""
    from datasets import load_from_disk

    rows, seen = [], set()
    for r in load_from_disk(str(data))[split]:
        if len(rows) >= limit:
            break
        if (style is None or r["style"] == style) and r["video"] not in seen:
            seen.add(r["video"])
            rows.append(r)
    return rows


def _release_info(release: Path) -> dict[str, Any]:
    m = json.loads((release / "manifest.json").read_text()) if (release / "manifest.json").is_file() else {}
    return {"metrics": m.get("metrics"), "parameters": m.get("parameters"), "layers": m.get("layers"),
            "fingerprint": m.get("fingerprint")}


@torch.inference_mode()
def _greedy_along(model, request, token_ids: list[int]) -> list[int]:
    """The model's greedy next token at each position of ``token_ids`` (teacher-forced)."""
    state = model.prefill(request)
    preds = [int(state.first_logits.argmax())]
    if len(token_ids) > 1:
        preds += model.verify(state, token_ids[:-1]).logits.argmax(-1).tolist()
    return preds


def _draft_disagreement(draft, request, token_ids: list[int], labels: list[str]) -> dict[str, list[int]]:
    """Teacher-forced: [differs, positions] of the draft's greedy token against ``token_ids``, filler and visual."""
    out = {"filler": [0, 0], "visual": [0, 0]}
    for p, t, lab in zip(_greedy_along(draft, request, token_ids), token_ids, labels):
        if lab == "special":
            continue
        kind = "filler" if lab == "filler" else "visual"
        out[kind][0] += int(p != t)
        out[kind][1] += 1
    return out


def _teacher_forced(target, request, token_ids: list[int], labels: list[str]) -> dict[str, list[int]]:
    """Per label: [right, total] of the target's greedy next token along a reference caption."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for p, t, lab in zip(_greedy_along(target, request, token_ids), token_ids, labels):
        if lab != "special":
            out[lab][0] += int(p == t)
            out[lab][1] += 1
    return out


def measure_testbed(data: str | Path, target: str | Path, draft: str | Path | None = None,
                    sparrow: str | Path | None = None, split: str = "validation", limit: int = 32,
                    mcq_limit: int | None = None, max_new_tokens: int = 64, k: int = 4,
                    device: str | None = None) -> dict[str, Any]:
    """Measure a testbed target (and its drafts) on a SynthVid dataset; returns the report of the module doc.

    Args:
        data: SynthVid dataset folder (captions at its root, ``mcq`` beside them).
        target: the target release.
        draft: a draft VLM release (strict speculative decoding and disagreement), or None.
        sparrow: a Sparrow release (its strict tau), or None.
        split: dataset split.
        limit: videos captioned (and reference captions teacher-forced).
        mcq_limit: multiple-choice questions answered (default: ``limit``): a question costs one short greedy
            answer, a caption several decoding passes, so the MCQ can afford a tighter interval.
        max_new_tokens: most tokens per caption.
        k: draft tokens per round.
        device: torch device (default: cuda when available).
    """
    from datasets import load_from_disk

    from vidspec.decoding.methods import build_decoder
    from vidspec.decoding.models import load_target
    from vidspec.decoding.types import Request
    from vidspec.evaluation.synthvid.judge import judge_caption
    from vidspec.evaluation.synthvid.mcq import extract_choice
    from vidspec.evaluation.synthvid.questions import mcq_prompt
    from vidspec.evaluation.synthvid.tokenizer import token_labels

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    data, target_dir = Path(data), Path(target)
    tgt = load_target(str(target), device=device)
    dft = load_target(str(draft), device=device) if draft else None
    ar = build_decoder("ar", target=tgt)
    sd = build_decoder("sd", target=tgt, draft=dft, k=k) if dft is not None else None
    sp = build_decoder("sparrow", target=tgt, draft=str(sparrow), k=k) if sparrow else None

    # Teacher-forced grounding on reference captions of the target's own style(s).
    styles = (json.loads((target_dir / "manifest.json").read_text()).get("caption_styles")
              if (target_dir / "manifest.json").is_file() else None)
    tf: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    n_tf = 0
    for r in load_from_disk(str(data))[split]:
        if n_tf >= limit:
            break
        if styles and r["style"] not in styles:
            continue
        ids = tgt.tokenizer(r["answer"], add_special_tokens=False)["input_ids"] + list(tgt.eos_token_ids)[:1]
        request = Request(prompt=r["question"], clip=tgt.read_video(str(data / r["video"])))
        for lab, (ok, n) in _teacher_forced(tgt, request, ids, token_labels(ids, tgt.tokenizer)).items():
            tf[lab][0] += ok
            tf[lab][1] += n
        n_tf += 1

    # Greedy captions: fact judge, and the drafts' tau on the same prompts.
    rows = caption_rows(data, split, limit)
    claims_true = claims = found = total = 0
    per_cat: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    dis = {"filler": [0, 0], "visual": [0, 0]}
    tau = {"draft": [0, 0], "sparrow": [0, 0]}  # emitted tokens, rounds
    lossless = {"draft": True, "sparrow": True}
    examples, hallucinated, per_caption = [], [], []
    t0 = time.perf_counter()
    for r in rows:
        request = Request(prompt=r["question"], clip=tgt.read_video(str(data / r["video"])))
        res = ar.generate(request, max_new_tokens=max_new_tokens)
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
        if j.hallucinations:
            hallucinated.append({"video": r["video"], "reference": r["answer"], "generated": res.text,
                                 "false_claims": [{"category": c.category, "text": c.text} for c in j.hallucinations]})
        for name, dec in (("draft", sd), ("sparrow", sp)):
            if dec is None:
                continue
            s = dec.generate(request, max_new_tokens=max_new_tokens)
            lossless[name] &= s.token_ids == res.token_ids
            tau[name][0] += sum(st.emitted for st in s.steps)
            tau[name][1] += len(s.steps)
        if dft is not None:
            d = _draft_disagreement(dft, request, list(res.token_ids), token_labels(res.token_ids, tgt.tokenizer))
            for key in dis:
                dis[key][0] += d[key][0]
                dis[key][1] += d[key][1]
    caption_s = time.perf_counter() - t0

    # Multiple choice: the letter extracted from a short greedy answer.
    mcq = load_from_disk(str(data / "mcq"))[split]
    correct = n_mcq = 0
    by_type: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    chosen: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in mcq.select(range(min(limit if mcq_limit is None else mcq_limit, len(mcq)))):
        request = Request(prompt=mcq_prompt(r["question"], r["options"]), clip=tgt.read_video(str(data / r["video"])))
        choice = extract_choice(ar.generate(request, max_new_tokens=4).text, options=r["options"])
        ok = int(choice == r["answer"])
        kind = r.get("task_type") or "?"
        chosen[kind][choice or "none"] += 1
        correct += ok
        n_mcq += 1
        by_type[kind][0] += ok
        by_type[kind][1] += 1

    report: dict[str, Any] = {
        "data": str(data), "split": split, "device": device, "machine": platform.machine(),
        "target": {"path": str(target), **_release_info(target_dir)},
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
    if dft is not None:
        report["draft"] = {
            "path": str(draft), **_release_info(Path(draft)), "k": k,
            "tau": tau["draft"][0] / tau["draft"][1] if tau["draft"][1] else None, "lossless": lossless["draft"],
            "disagreement": {key: (v[0] / v[1] if v[1] else None) for key, v in dis.items()},
            "positions": {key: v[1] for key, v in dis.items()},
        }
    if sp is not None:
        report["sparrow"] = {"path": str(sparrow), "k": k, "lossless": lossless["sparrow"],
                             "tau": tau["sparrow"][0] / tau["sparrow"][1] if tau["sparrow"][1] else None}
    return report
