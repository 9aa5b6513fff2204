"""Which release-size target shapes a CPU can afford: seconds per 64-token caption and bfloat16 size, per shape.

Issue 4's release target must caption in under 2 s on 2 CPU cores and fit, with the other releases, in ~30 MB.
Its MCQ bar is missed on motion questions at every release shape trained so far (RESULTS 27-28: 6 and 10 layers),
while the 24-layer GPU-scale target answers them; depth is the part of that size not yet tried at release size.
Before a GPU run trains a deeper shape, this measures what each candidate would cost where the release runs: each
shape is the committed target (`data/releases/synthvid-target`: its tokenizer, processor and vision tower) with
its language model rebuilt at that shape with random weights, and each caption is an AR decode of exactly
``--new-tokens`` tokens (no token ends it, so every shape decodes the same length) from a SynthVid video, through the same decoder `vidspec generate` uses. Speed does not depend on the weights' values.

    python benchmarks/release_shape_cpu.py --out benchmarks/results/release_shape_cpu.json

A shape is ``LAYERSxHIDDEN/HEADS`` (key/value heads 2, or 1 where HEADS is odd; MLP 4 x hidden), or
``LAYERSxHIDDEN/HEADS:fMLP`` with the MLP's width given (``24x96/2:f192``: 24 layers at the parameters of 16 with
MLP 384). Prints a table and writes JSON with the machine, and the size the committed releases take now
(``releases_mb``; issue 4 allows ~30 MB in all).

``--family qwen2.5-vl`` times Qwen2.5-VL targets instead (no Qwen2.5-VL release is committed): the committed
tokenizer, and the vision tower ``train_releases_gpu.sh`` gives a Qwen release target (hidden 128, 4 layers, 4 heads,
8 px patches, 64 x 64 pixels a frame: 16 visual tokens per frame pair) with random weights like the language model::

    python benchmarks/release_shape_cpu.py --family qwen2.5-vl --shapes 16x96/2,24x96/2,12x128/2

``--tower h192`` or ``h256`` gives that Qwen target a wider tower (4 layers, heads of 32), as
``RELEASE_TOWER=h256`` does in train_releases_gpu.sh.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from vidspec.evaluation.runner import git_info, machine_info

sys.path.insert(0, str(Path(__file__).resolve().parent))
from testbed_common import emit_json  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
COMMITTED = REPO / "data" / "releases" / "synthvid-target"
SHAPES = "6x192/6,10x192/6,16x192/3,24x192/3,16x128/2,24x128/2,24x256/4"


def parse_shape(text: str) -> dict:
    """``"24x128/2"`` -> layers, hidden size, heads, key/value heads and MLP width (``"24x96/2:f192"``: 192; else
    None, the architecture's 4 x hidden).

    Raises:
        ValueError: a malformed shape, named in the message.
    """
    try:
        core, _, mlp = text.partition(":")
        dims, heads = core.split("/")
        layers, hidden = (int(x) for x in dims.split("x"))
        heads = int(heads)
        if mlp and not mlp.startswith("f"):
            raise ValueError
        intermediate = int(mlp[1:]) if mlp else None
    except ValueError:
        raise ValueError(
            f"shape {text!r}: expected LAYERSxHIDDEN/HEADS[:fMLP], e.g. 24x128/2 or 24x96/2:f192") from None
    if min(layers, hidden, heads, 1 if intermediate is None else intermediate) < 1 or hidden % heads:
        raise ValueError(f"shape {text!r}: the hidden size must be a positive multiple of the heads")
    return {"layers": layers, "hidden": hidden, "heads": heads, "kv_heads": 2 if heads % 2 == 0 else 1,
            "intermediate": intermediate}


def committed_parts() -> dict:
    """What every shape keeps of the committed target, read once: its architecture, tokenizer and tower weights."""
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    from vidspec.draft_training.arch import ArchConfig

    model = AutoModelForImageTextToText.from_pretrained(COMMITTED)
    return {"arch": ArchConfig(**json.loads((COMMITTED / "manifest.json").read_text())["arch"]),
            "tokenizer": AutoTokenizer.from_pretrained(COMMITTED),
            "tower": model.model.vision_tower.state_dict()}


#: The vision tower and processing of a Qwen2.5-VL release target as benchmarks/train_releases_gpu.sh trains it.
QWEN_TOWER = {"family": "qwen2.5-vl", "vision_hidden_size": 128, "vision_layers": 4, "vision_heads": 4,
              "patch_size": 8, "image_size": 64}
QWEN_OPTIONS = {"min_pixels": 4096, "max_pixels": 4096}
#: ``--tower``: the Qwen2.5-VL tower's width (heads of 32), as train_releases_gpu.sh's RELEASE_TOWER.
QWEN_TOWER_WIDTHS = {"h128": 128, "h192": 192, "h256": 256}


def qwen_tower(tower: str) -> dict:
    """:data:`QWEN_TOWER` at the width ``--tower`` names (``"h256"``: hidden 256, 8 heads)."""
    width = QWEN_TOWER_WIDTHS[tower]
    return {**QWEN_TOWER, "vision_hidden_size": width, "vision_heads": width // 32}


def build(shape: dict, committed: dict, out: Path, seed: int = 0, family: str = "llava-ov",
          tower: str = "h128") -> int:
    """The committed release folder copied to ``out`` with its language model at ``shape`` (random weights, the
    vision tower kept; ``committed``: :func:`committed_parts`); returns the parameter count. ``family="qwen2.5-vl"``:
    a Qwen2.5-VL release folder instead (the committed tokenizer, :func:`qwen_tower` with random weights)."""
    from dataclasses import replace

    from vidspec.draft_training.arch import build_hf_config, hf_model_class
    from vidspec.draft_training.export import write_release_options

    arch = replace(committed["arch"], num_layers=shape["layers"], hidden_size=shape["hidden"],
                   num_heads=shape["heads"], num_kv_heads=shape["kv_heads"], intermediate_size=shape["intermediate"],
                   **(qwen_tower(tower) if family == "qwen2.5-vl" else {}))
    torch.manual_seed(seed)
    model = hf_model_class(arch.family)(build_hf_config(arch, committed["tokenizer"]))
    if family == "qwen2.5-vl":
        model.save_pretrained(out)
        committed["tokenizer"].save_pretrained(out)
        write_release_options(out, QWEN_OPTIONS, max_frames=8)
    else:
        shutil.copytree(COMMITTED, out)
        model.model.vision_tower.load_state_dict(committed["tower"])
        model.save_pretrained(out)
    return sum(p.numel() for p in model.parameters())


def caption_videos(tmp: Path, n: int) -> list[Path]:
    """``n`` SynthVid validation videos (seed 5) written under ``tmp``: the clips every shape and release captions."""
    from vidspec.evaluation.synthvid import SynthVidConfig, generate_synthvid

    data = generate_synthvid(tmp / "sv", SynthVidConfig(
        num_videos=n, seed=5, preset="easy", size="64x64", frames=8, split="validation",
        mcq_per_video=0, open_per_video=0), progress=False)
    return sorted((data / "videos").rglob("*.mp4"))[:n]


def time_captions(target_dir: Path, videos: list[Path], new_tokens: int, repeats: int) -> dict:
    """Median seconds per caption of exactly ``new_tokens`` tokens (one warm-up caption first)."""
    from vidspec.decoding import Request, build_decoder, load_target

    target = load_target(str(target_dir))
    target.eos_token_ids = frozenset()  # every caption runs to new_tokens, whatever the random weights choose
    ar = build_decoder("ar", target=target)
    requests = [Request(prompt="Describe the video.", clip=target.read_video(str(v))) for v in videos]
    ar.generate(requests[0], max_new_tokens=new_tokens)
    times, lengths = [], []
    for _ in range(repeats):
        for r in requests:
            t0 = time.perf_counter()
            res = ar.generate(r, max_new_tokens=new_tokens)
            times.append(time.perf_counter() - t0)
            lengths.append(len(res.token_ids))
    return {"seconds_per_caption": statistics.median(times), "captions": len(times),
            "new_tokens": statistics.median(lengths)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=SHAPES, help=f"comma-separated LAYERSxHIDDEN/HEADS (default {SHAPES})")
    ap.add_argument("--videos", type=int, default=3, help="SynthVid videos to caption (default 3)")
    ap.add_argument("--repeats", type=int, default=2, help="captions of each video per shape (default 2)")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default 2: the bar's 2 cores)")
    ap.add_argument("--family", choices=("llava-ov", "qwen2.5-vl"), default="llava-ov",
                    help="llava-ov: the committed target's tower and processor; qwen2.5-vl: a Qwen release target's")
    ap.add_argument("--tower", choices=sorted(QWEN_TOWER_WIDTHS), default="h128",
                    help="qwen2.5-vl: the tower's width (default h128, the release tower)")
    ap.add_argument("--release", type=Path, action="append", default=[],
                    help="time this exported target as it is, its trained weights included (the end of text is "
                         "switched off, so it too writes --new-tokens); repeatable, and no --shapes then")
    ap.add_argument("--out", type=Path, help="write the JSON here")
    args = ap.parse_args(argv)
    if args.release:
        return time_releases(args)
    try:
        shapes = [parse_shape(s) | {"name": s} for s in args.shapes.split(",")]
    except ValueError as e:
        ap.error(str(e))
    if args.family == "llava-ov" and args.tower != "h128":
        ap.error("--tower widens a Qwen2.5-VL target's tower (--family qwen2.5-vl); llava-ov keeps the committed one")
    if not (COMMITTED / "config.json").is_file():
        ap.error(f"{COMMITTED}: the committed release target is missing")
    torch.set_num_threads(args.threads)
    committed = committed_parts()
    rows = []
    print("| shape | parameters | bfloat16 | seconds per caption | new tokens |\n|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        videos = caption_videos(Path(tmp), args.videos)
        for shape in shapes:
            folder = Path(tmp) / shape["name"].replace("/", "h")
            params = build(shape, committed, folder, family=args.family, tower=args.tower)
            row = {**shape, "parameters": params, "bf16_mb": params * 2 / 1e6,
                   **time_captions(folder, videos, args.new_tokens, args.repeats)}
            rows.append(row)
            print(f"| {shape['name']} | {params / 1e6:.2f}M | {row['bf16_mb']:.1f} MB | "
                  f"{row['seconds_per_caption']:.2f} s | {row['new_tokens']:.0f} |", flush=True)
    tower = ("the committed tower, tokenizer and processor" if args.family == "llava-ov" else
             f"the committed tokenizer; a Qwen2.5-VL tower {qwen_tower(args.tower)} with random weights")
    releases_mb = sum(f.stat().st_size for f in COMMITTED.parent.rglob("*") if f.is_file()) / 1e6
    print(f"the committed releases take {releases_mb:.2f} MB (issue 4: ~30 MB in all)")
    doc = {"bar_seconds": 2.0, "threads": args.threads, "family": args.family, "tower": args.tower,
           "releases_mb": releases_mb, "shapes": rows,
           "machine": machine_info("cpu"), "git": git_info(),
           "note": f"random language-model weights at each shape; {tower}; AR decodes of a fixed length"}
    emit_json(doc, args.out, echo=False)
    return 0


def time_releases(args) -> int:
    """``--release``: seconds per caption of each named release, as it is, on the same videos as the shapes."""
    torch.set_num_threads(args.threads)
    rows = []
    print("| release | parameters | seconds per caption | new tokens |\n|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        videos = caption_videos(Path(tmp), args.videos)
        for folder in args.release:
            if not (folder / "config.json").is_file():
                print(f"release_shape_cpu.py: {folder} is not an exported target (no config.json)", file=sys.stderr)
                return 2
            manifest = json.loads((folder / "manifest.json").read_text()) if (folder / "manifest.json").is_file() else {}
            row = {"release": str(folder), "parameters": manifest.get("parameters"),
                   **time_captions(folder, videos, args.new_tokens, args.repeats)}
            rows.append(row)
            print(f"| {folder} | {row['parameters']} | {row['seconds_per_caption']:.2f} s | {row['new_tokens']:.0f} |",
                  flush=True)
    doc = {"bar_seconds": 2.0, "threads": args.threads, "releases": rows, "machine": machine_info("cpu"),
           "git": git_info(), "note": "the releases' own weights; end of text off; AR decodes of a fixed length"}
    emit_json(doc, args.out, echo=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
