"""An MCQ question type answered through the *training* forward: does a trained target fail a type at generation
time only (a train/inference mismatch), or in the training path too (a model that has not learnt it)?

For one question type of a SynthVid ``mcq`` table, the first ``--limit`` rows are batched by the training data
module (the prompt the SFT trained on), run through ``VLMSFTModule.hidden_states`` and the LM head, and the
answer's first token (the option letter) is compared with the model's argmax there. Qwen2.5-VL targets are run
twice, with vidspec's batched M-RoPE positions and with transformers' own, so the two position paths are
compared too. Prints one JSON object (and writes it with ``--out``)::

    python benchmarks/mcq_teacher_forced.py --data DATA --target data/releases/synthvid-target --type motion

Figures:
  letter_accuracy    share of questions whose letter is the model's argmax, teacher-forced
  letters            the letters the model puts first, counted (one or two letters taking most: answered by
                     position, not content)
  loss               mean cross-entropy over the answer tokens (letter, full stop, end of text)
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
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
    ap.add_argument("--limit", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    data = Path(args.data)
    table = load_from_disk(str(data / "mcq"))[args.split]
    rows = table.filter(lambda r: r["task_type"] == args.type)
    rows = rows.select(range(min(args.limit, len(rows))))
    if len(rows) == 0:
        print(f"mcq_teacher_forced: no {args.type!r} questions in {data / 'mcq'} [{args.split}]", file=sys.stderr)
        sys.exit(2)
    family = json.loads((Path(args.target) / "manifest.json").read_text())["family"]
    report = {"data": str(data), "split": args.split, "target": args.target, "family": family, "type": args.type,
              "questions": len(rows), "machine": platform.machine(), "paths": {}}
    with tempfile.TemporaryDirectory() as tmp:
        DatasetDict({"train": rows, args.split: rows}).save_to_disk(str(Path(tmp) / "mcq"))
        for batched in ((True, False) if family == "qwen2.5-vl" else (True,)):
            module = VLMSFTModule(init_from=args.target, batched_positions=batched).eval()
            dm = VideoTextDataModule(path=tmp, tables=["mcq"], val_split=args.split, video_root=str(data),
                                     batch_size=args.batch, max_val_samples=None, num_workers=0)
            dm.attach(module.input_spec())
            dm.setup("fit")
            ok = n = 0
            losses: list[float] = []
            letters: Counter[str] = Counter()
            with torch.no_grad():
                for batch in dm.val_dataloader():
                    h = module.hidden_states(batch)
                    target = batch["labels"][:, 1:]
                    for i in range(target.shape[0]):
                        pos = int((target[i] != -100).nonzero()[0, 0])  # the answer's first token: its letter
                        pred = int(module.model.lm_head(h[i, pos]).argmax())
                        ok += int(pred == int(target[i, pos]))
                        n += 1
                        letters[module.tokenizer.decode([pred]).strip() or "?"] += 1
                    losses.append(float(module.loss(batch)[0]))
            name = "batched_positions" if batched else "transformers_positions"
            report["paths"][name] = {"letter_accuracy": ok / n, "correct": ok, "questions": n,
                                     "letters": dict(sorted(letters.items())), "loss": sum(losses) / len(losses)}
    emit_json(report, args.out)


if __name__ == "__main__":
    main()
