"""An MCQ question type answered through the *training* forward: does a trained target fail a type at generation
time only (a train/inference mismatch), or in the training path too (a model that has not learnt it)?

For one question type of a SynthVid ``mcq`` table, the first ``--limit`` rows are batched by the training data
module (the prompt the SFT trained on), run through ``VLMSFTModule.hidden_states`` and the LM head, and the
answer's first token (the option letter) is compared with the model's argmax there. Qwen2.5-VL targets are run
twice, with vidspec's batched M-RoPE positions and with transformers' own, so the two position paths are
compared too. Prints one JSON object (and writes it with ``--out``)::

    python benchmarks/mcq_teacher_forced.py --data DATA --target data/releases/synthvid-target --type motion

Figures:
  letter_accuracy    share of questions whose letter is the model's argmax, teacher-forced (a text answer's first
                     token)
  letters            the letters the model puts first, counted (one or two letters taking most: answered by
                     position, not content)
  confusion          (multiple choice) right option's text -> the text of the option picked -> count
  answer_accuracy    share of questions whose every answer token is the model's argmax, teacher-forced
  loss               mean cross-entropy over the answer tokens (letter, full stop, end of text)
  text_accuracy,     (text-then-letter answers, ``mcq_variants.py --answer text-letter``: ``Moves up. Answer: D``)
  letter_given_text  every token before the letter right, and the letter right among the questions whose text is
                     right: can the model find the letter of the option it has just stated?
  confusion_after_text  (text-then-letter answers) as ``confusion``, for the letter after the text

``--table`` reads another table of DATA in the same form, e.g. one written by ``mcq_variants.py`` (``mcqtext``: the
same prompts answered with the option's text; its ``answer_accuracy`` says whether the content is right, and
``--probe`` then fits the probe where that answer starts).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mcq_variants import LETTER_MARK, option_text  # noqa: E402
from testbed_common import emit_json  # noqa: E402


def main() -> None:
    import torch
    from datasets import DatasetDict, load_from_disk

    from vidspec.draft_training.data import VideoTextDataModule
    from vidspec.draft_training.sft import VLMSFTModule

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="a SynthVid folder (with an mcq table)")
    ap.add_argument("--target", required=True, help="a Video-LLM release (vidspec export)")
    ap.add_argument("--type", required=True, help="question type: colour, shape, motion, count, ...")
    ap.add_argument("--split", default="validation")
    ap.add_argument("--table", default="mcq", help="the table of DATA to read (default: mcq)")
    ap.add_argument("--video-root", default=None, help="folder the table's video paths are relative to "
                                                       "(default: DATA)")
    ap.add_argument("--limit", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--probe", action="store_true",
                    help="also fit a linear probe from the hidden state where the letter is predicted to the right "
                         "option's text (e.g. 'Moves up.'): is the answer there, only not bound to its letter?")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    data = Path(args.data)
    table = load_from_disk(str(data / args.table))[args.split]
    rows = table.filter(lambda r: r["task_type"] == args.type)
    rows = rows.select(range(min(args.limit, len(rows))))
    if len(rows) == 0:
        print(f"mcq_teacher_forced: no {args.type!r} questions in {data / args.table} [{args.split}]", file=sys.stderr)
        sys.exit(2)
    family = json.loads((Path(args.target) / "manifest.json").read_text())["family"]
    report = {"data": str(data), "table": args.table, "split": args.split, "target": args.target, "family": family,
              "type": args.type, "questions": len(rows), "machine": platform.machine(), "paths": {}}
    with tempfile.TemporaryDirectory() as tmp:
        DatasetDict({"train": rows, args.split: rows}).save_to_disk(str(Path(tmp) / args.table))
        for batched in ((True, False) if family == "qwen2.5-vl" else (True,)):
            module = VLMSFTModule(init_from=args.target, batched_positions=batched).eval()
            dm = VideoTextDataModule(path=tmp, tables=[args.table], val_split=args.split,
                                     video_root=args.video_root or str(data),
                                     batch_size=args.batch, max_val_samples=None, num_workers=0)
            dm.attach(module.input_spec())
            dm.setup("fit")
            ok = n = whole = 0
            parts = [0, 0, 0]  # text-letter answers: rows with a letter, text right, text and letter right
            stated: list[str] = []  # text-letter answers: the letter the model puts after the (right) text
            losses: list[float] = []
            letters: Counter[str] = Counter()
            chosen: list[str] = []
            feats: list[torch.Tensor] = []
            with torch.no_grad():
                for batch in dm.val_dataloader():
                    h = module.hidden_states(batch)
                    at, pred, true = module.answer_letters(h, batch, list(range(h.shape[0])))
                    feats.append(at.float())
                    ok += int((pred == true).sum())
                    target, argmax = answer_argmax(module, h, batch)
                    whole += int(((argmax == target) | (target == -100)).all(1).sum())
                    for *row, letter in text_letter_parts(module.tokenizer, target, argmax):
                        parts = [a + b for a, b in zip(parts, row)]
                        stated.append(letter)
                    n += len(pred)
                    firsts = [module.tokenizer.decode([p]).strip() or "?" for p in pred.tolist()]
                    letters.update(firsts)
                    chosen += firsts
                    losses.append(float(module.answer_loss(h, batch)[0]))
            name = "batched_positions" if batched else "transformers_positions"
            report["paths"][name] = {"letter_accuracy": ok / n, "correct": ok, "questions": n,
                                     "answer_accuracy": whole / n,
                                     "letters": dict(sorted(letters.items())), "loss": sum(losses) / len(losses)}
            if parts[0]:
                report["paths"][name].update(text_accuracy=parts[1] / parts[0],
                                             letter_given_text=parts[2] / max(parts[1], 1))
                if parts[0] == len(rows):  # every row a text-letter answer: which option the stated letter picks
                    report["paths"][name]["confusion_after_text"] = confusion(rows, stated)
            if "options" in rows.column_names:
                report["paths"][name]["confusion"] = confusion(rows, chosen)
            if "facts" in rows.column_names:
                report["paths"][name]["by_objects"] = by_objects(rows, chosen)
            if args.probe and batched:
                # a text-then-letter answer is probed for its text (the letter is what has to be found from it)
                answers = [option_texts(r)[r["answer"]] if r.get("options") else r["answer"].split(LETTER_MARK)[0]
                           for r in rows]
                report["probe"] = linear_probe(torch.cat(feats), answers)
    emit_json(report, args.out)


def option_texts(row: dict) -> dict[str, str]:
    """A multiple-choice row's options by letter: ``["A. Moves up.", ...]`` -> ``{"A": "Moves up.", ...}``; a row
    with its options inside the question (``mcq_variants.py`` text answers) is read from the question's lines."""
    options = row.get("options") or [line for line in row["question"].split("\n") if re.match(r"[A-Z]\. ", line)]
    return {o.split(". ", 1)[0]: option_text(o) for o in options}


def confusion(rows, chosen: list[str]) -> dict[str, dict[str, int]]:
    """Right option's text -> the text of the option whose letter the model put first -> count (``"?X"`` when the
    first token is no option's letter): which options a model picks, whatever their letters."""
    out: dict[str, Counter[str]] = {}
    for r, letter in zip(rows, chosen):
        texts = option_texts(r)
        truth = texts[r["answer"][-1]]  # a text-letter answer ends with its letter
        out.setdefault(truth, Counter())[texts.get(letter, "?" + letter)] += 1
    return {t: dict(c.most_common()) for t, c in sorted(out.items())}


def by_objects(rows, chosen: list[str]) -> dict[str, dict[str, int]]:
    """Per number of objects in the clip (``facts["count"]``): questions, right letters, and wrong letters whose option
    states what holds for *another* object of the clip than the one asked about (its motion, shape or colour, as
    ``"Moves left."`` states ``"left"``): a question answered for the wrong object, not a fact the model lacks."""
    out: dict[str, Counter[str]] = {}
    for r, letter in zip(rows, chosen):
        facts = json.loads(r["facts"])
        texts = option_texts(r)
        c = out.setdefault(str(facts["count"]), Counter())
        c["questions"] += 1
        if letter == r["answer"][-1]:
            c["correct"] += 1
        elif letter in texts:
            said = texts[letter].rstrip(".").lower()
            asked = [o for o in facts["objects"] if _asks_about(r["question"], o)]
            if any(said in _stated(o) for o in facts["objects"] if o not in asked):
                c["another_object"] += 1
    return {k: dict(v) for k, v in sorted(out.items())}


def _asks_about(question: str, obj: dict) -> bool:
    """Whether a SynthVid question names ``obj`` (``the red square``, ``the square``, ``the red object``)."""
    q = question.lower()
    return any(f"the {name}" in q for name in (f"{obj['colour']} {obj['shape']}", f"{obj['shape']}?",
                                               f"{obj['colour']} object"))


def _stated(obj: dict) -> set[str]:
    """What an option can state of ``obj``: its motion (SynthVid's phrase: ``moves left``, ``stays still``), shape or
    colour."""
    from vidspec.evaluation.synthvid.questions import MOTION_PHRASES

    return {MOTION_PHRASES.get(obj["motion"], obj["motion"]), obj["shape"], obj["colour"]}


def letter_index(pieces: list[str]) -> int | None:
    """Where a text-then-letter answer's letter is, among its decoded answer tokens (``["Moves", " up", ".",
    " Answer", ":", " D", "<end>"]`` -> 5): the last token that is one capital letter right after a colon."""
    hits = [j for j in range(1, len(pieces))
            if len(pieces[j].strip()) == 1 and pieces[j].strip().isupper() and pieces[j - 1].strip().endswith(":")]
    return hits[-1] if hits else None


def text_letter_parts(tokenizer, target, argmax):
    """Per row with a text-then-letter answer (``answer_argmax``'s tensors): (1, every token before the letter right,
    those and the letter right, the letter the model puts there), teacher-forced; rows without a letter after a colon
    are left out."""
    out = []
    for ids, pred in zip(target, argmax):
        keep = ids != -100
        ids, pred = ids[keep], pred[keep]
        li = letter_index([tokenizer.decode([t]) for t in ids.tolist()])
        if li is None:
            continue
        good = (pred == ids).tolist()
        text_ok = all(good[:li])
        out.append((1, int(text_ok), int(text_ok and good[li]), tokenizer.decode([int(pred[li])]).strip()))
    return out


def answer_argmax(module, h, batch):
    """The answer tokens (``labels`` shifted; -100 off the answer) and the LM head's argmax where each is predicted
    (-100 off the answer). The head runs on answer positions only, as the training loss runs it (a video prompt is
    mostly never predicted)."""
    import torch

    target = batch["labels"][:, 1:]
    answer = target != -100
    argmax = torch.full_like(target, -100)
    argmax[answer] = module.model.lm_head(h[:, :-1][answer]).argmax(-1)
    return target, argmax


def linear_probe(x, labels: list[str], train_share: float = 0.7, steps: int = 500, seed: int = 0) -> dict:
    """Multinomial logistic regression from ``x`` (N, d) to ``labels``, fitted on the first ``train_share`` of the
    rows (standardised on them) and scored on the rest; with the majority class's share of the held-out rows."""
    import torch

    classes = sorted(set(labels))
    y = torch.tensor([classes.index(c) for c in labels])
    n_train = int(len(labels) * train_share)
    if n_train < 2 or n_train >= len(labels):
        return {"error": f"{len(labels)} questions are too few for a probe"}
    mean, std = x[:n_train].mean(0), x[:n_train].std(0) + 1e-6
    z = (x - mean) / std
    torch.manual_seed(seed)
    head = torch.nn.Linear(z.shape[1], len(classes))
    opt = torch.optim.Adam(head.parameters(), lr=1e-2, weight_decay=1e-3)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(head(z[:n_train]), y[:n_train]).backward()
        opt.step()
    with torch.no_grad():
        test_acc = float((head(z[n_train:]).argmax(1) == y[n_train:]).float().mean())
        train_acc = float((head(z[:n_train]).argmax(1) == y[:n_train]).float().mean())
    majority = Counter(y[n_train:].tolist()).most_common(1)[0][1] / (len(labels) - n_train)
    return {"classes": classes, "train": n_train, "test": len(labels) - n_train, "train_accuracy": train_acc,
            "test_accuracy": test_acc, "majority_share": majority}


if __name__ == "__main__":
    main()
