"""Where a Sparrow draft is rejected: the word class of the target's token at each rejection.

Sparrow's draft never sees the video. It reads the target's states of the tokens before the round,
so a visual word (a colour, a shape, a direction) that the target has not yet "said" can only be
guessed. This script measures how much of the lost acceptance that explains. It decodes SynthVid
caption prompts with strict Sparrow (lossless: the output is the target's greedy caption), records
every round's proposal and decision, and for each rejection classifies the target's token at the
rejected position (the correction token) by SynthVid's word labels
(:func:`vidspec.evaluation.synthvid.tokenizer.token_labels`):

- colour (object and background colours), shape, size, motion (the directions and
  still/grows/shrinks/rotates), count, event;
- filler: every other token (articles, verbs such as "slides", punctuation, ...);
- special: the end-of-text token.

Printed and written to ``sparrow_rejections.json`` (with machine info): per class, its share of
the emitted tokens, its share of the rejections and the rejection rate per drafted-and-checked
position of that class; and the acceptance rate by draft position (1..K).

Usage::

    .venv/bin/python benchmarks/sparrow_rejections.py --out benchmarks/results/sparrow_rejections    # CPU, releases
    python benchmarks/sparrow_rejections.py --device cuda --engine fast --target T --sparrow S --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from testbed_common import add_testbed_args, caption_rows  # noqa: E402

from vidspec.evaluation.runner import git_info, machine_info  # noqa: E402
from vidspec.evaluation.synthvid.grammar import LABELS  # noqa: E402


def label_of(target):
    """Token id -> SynthVid word label (``colour``, ``shape``, ``size``, ``motion``, ``count``,
    ``event``, ``filler``, or ``special`` for special tokens such as end-of-text), by the dataset's own ``token_labels`` on the target's tokenizer."""
    from vidspec.evaluation.synthvid.tokenizer import token_labels

    cache: dict[int, str] = {}

    def label(tok: int) -> str:
        if tok not in cache:
            cache[tok] = token_labels([tok], target.tokenizer)[0]
        return cache[tok]

    return label


class RecordingVerifier:
    """Delegates to a verifier and keeps each round's ``(drafted tokens, n accepted, next token)``."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.need = inner.need
        self.rounds: list[tuple[tuple[int, ...], int, int]] = []

    def verify(self, proposal, out, ctx):
        decision = self.inner.verify(proposal, out, ctx)
        self.rounds.append((tuple(proposal.tokens), decision.n_accepted, decision.next_token))
        return decision


def tally(rounds: list[tuple[tuple[int, ...], int, int]], emitted: list[int], token_class) -> dict:
    """Rejections by class and acceptance by draft position, from recorded rounds.

    Args:
        rounds: ``(drafted, n_accepted, next_token)`` per round.
        emitted: every token the decode emitted (the base rate of each class).
        token_class: token id -> class name.
    """
    base = Counter(token_class(t) for t in emitted)
    rejected: Counter = Counter()
    checked: Counter = Counter()  # drafted positions the target checked, by the target token's class there
    pos_drafted: Counter = Counter()
    pos_accepted: Counter = Counter()
    for drafted, n, nxt in rounds:
        for i, tok in enumerate(drafted[:n]):  # accepted: the target's token equals the draft's
            checked[token_class(tok)] += 1
            pos_accepted[i + 1] += 1
            pos_drafted[i + 1] += 1
        if n < len(drafted):  # the first mismatch: the target said nxt where the draft said drafted[n]
            cls = token_class(nxt)
            rejected[cls] += 1
            checked[cls] += 1
            pos_drafted[n + 1] += 1
    total_emitted = sum(base.values()) or 1
    total_rejected = sum(rejected.values()) or 1
    by_class = {c: {"share_of_tokens": base[c] / total_emitted, "share_of_rejections": rejected[c] / total_rejected,
                    "rejections": rejected[c], "checked": checked[c],
                    "rejection_rate": rejected[c] / checked[c] if checked[c] else None} for c in (*LABELS, "special")}
    by_position = {str(p): {"checked": pos_drafted[p], "accepted": pos_accepted[p],
                            "acceptance": pos_accepted[p] / pos_drafted[p]} for p in sorted(pos_drafted)}
    return {"by_class": by_class, "by_position": by_position, "rounds": len(rounds),
            "rejections": sum(rejected.values()), "emitted": sum(base.values())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_testbed_args(ap, ("target", "sparrow"), limit=25)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--engine", default="eager", choices=("eager", "fast"))
    ap.add_argument("--out", default="benchmarks/results/sparrow_rejections")
    args = ap.parse_args()

    import torch
    from tqdm import tqdm

    from vidspec.decoding.methods import build_decoder
    from vidspec.decoding.models import load_target
    from vidspec.decoding.types import Request

    t0 = time.perf_counter()
    data = Path(args.data)
    target = load_target(args.target, device=args.device)
    dec = build_decoder("sparrow", target=target, draft=args.sparrow, k=args.k, engine=args.engine)
    rec = RecordingVerifier(dec.verifier)
    dec.verifier = rec
    token_class = label_of(target)
    rows = caption_rows(data, args.split, args.limit, args.style)
    if not rows:
        raise SystemExit(f"{data}: no caption rows of style {args.style!r} in split {args.split!r}")
    emitted: list[int] = []
    with torch.inference_mode():
        for row in tqdm(rows, desc="captions", unit="caption"):
            clip = target.read_video(str(data / row["video"]))
            res = dec.generate(Request(prompt=row["question"], clip=clip), max_new_tokens=args.max_new_tokens)
            emitted.extend(res.token_ids[1:])  # the first token comes from prefill, not from a round
    result = tally(rec.rounds, emitted, token_class)
    tau = (len(emitted) / result["rounds"]) if result["rounds"] else None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"command": "python " + " ".join(sys.argv), "machine": machine_info(str(args.device)), "git": git_info(), "captions": len(rows),
           "k": args.k, "engine": args.engine, "device": args.device, "target": args.target, "sparrow": args.sparrow,
           "data": args.data, "split": args.split, "tau": tau, "seconds": time.perf_counter() - t0,
           "conventions": "strict greedy Sparrow; a rejection is classified by the target's token at the first "
                          "mismatching draft position; rejection_rate = rejections / drafted positions the target "
                          "checked whose target token is of that class; tokens after the first are round tokens",
           **result}
    (out / "sparrow_rejections.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"\n{len(rows)} captions, K = {args.k}, τ {tau:.2f}, {result['rounds']} rounds, "
          f"{result['rejections']} rejections\n")
    print("| class | share of tokens | share of rejections | rejection rate per checked position |")
    print("|---|---|---|---|")
    for c, v in result["by_class"].items():
        rate = "n/a" if v["rejection_rate"] is None else f"{v['rejection_rate']:.1%}"
        print(f"| {c} | {v['share_of_tokens']:.1%} | {v['share_of_rejections']:.1%} | {rate} |")
    print("\n| draft position | checked | acceptance |\n|---|---|---|")
    for p, v in result["by_position"].items():
        print(f"| {p} | {v['checked']} | {v['acceptance']:.1%} |")
    print(f"\nwrote {out / 'sparrow_rejections.json'}")


if __name__ == "__main__":
    main()
