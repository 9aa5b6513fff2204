"""Can a Qwen2.5-VL language model read motion from its video tokens, and what in its M-RoPE decides it?

The Qwen2.5-VL vision tower attends within one temporal patch (two frames) and, on a plain background, cannot
write an object's absolute place into its tokens: its 2-D RoPE is relative, and the background tokens all look
alike. Where the object is, and so which way it moves, can reach the language model only through the M-RoPE
positions (t, h, w) of the video tokens. Qwen2.5-VL gives each of t, h and w one contiguous band of the rotary
frequencies (``mrope_section``), in that order, so width gets the lowest ones: at vidspec's release sizes
(head 48, sections 8/8/8, base 10000) a step of one token in width turns a query by at most 0.002 rad. This
benchmark measures what that costs.

Frozen video tokens of a Qwen release's own tower (``--tower``: a ``vidspec export`` folder, whose tower and
merger are used as trained) are computed once for the single-object scenes of a SynthVid folder. Then, for each
configuration, a fresh ``Qwen2_5_VLTextModel`` (the real class; ``--layers`` x ``--hidden``) reads the video's
tokens followed by one learnt query token, with the positions ``get_rope_index`` gives a video (t, h, w from the
video's start, the query where text after the video starts, or ``--gap`` text positions later), and a linear
head on the query's last hidden state is trained to the object's motion (five classes: still, left, right, up,
down). Reported: held-out accuracy by step.

Configurations (``--configs``, comma-separated): ``s<T>-<H>-<W>_b<base>`` sets ``mrope_section`` and the RoPE
base; ``1d_b<base>`` gives every token t = h = w = its index, as a 1-D RoPE model (LLaVA-OneVision) sees it.
The same tokens, labels, seed, steps and learning rate serve every configuration, in one process::

    python benchmarks/qwen_mrope_motion.py --data DATA --tower runs/r29-qwen/stages/synthvid-target-sft \
        --configs s8-8-8_b10000,1d_b10000,s2-2-20_b10000,s2-2-20_b100 --out F
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from testbed_common import emit_json  # noqa: E402

MOTIONS = ("still", "left", "right", "up", "down")


def fail(message: str) -> None:
    """Bad input: one line on stderr, exit status 2."""
    print(f"qwen_mrope_motion: {message}", file=sys.stderr)
    sys.exit(2)


def parse_config(name: str) -> dict:
    """``s8-8-8_b10000`` -> sections (8, 8, 8), base 10000; ``1d_b10000`` -> 1-D positions."""
    try:
        pos, base = name.split("_b")
        base = float(base)
        if pos == "1d":
            return {"name": name, "sections": None, "base": base}
        sections = [int(x) for x in pos.lstrip("s").split("-")]
        if len(sections) != 3:
            raise ValueError
    except ValueError:
        fail(f"bad configuration {name!r} (want s<T>-<H>-<W>_b<base> or 1d_b<base>)")
    return {"name": name, "sections": sections, "base": base}


def scene_motion(facts: str) -> str | None:
    """The motion of a one-object scene whose object is there throughout; None for any other scene."""
    f = json.loads(facts)
    objs = f.get("objects", [])
    if len(objs) != 1 or f.get("events"):
        return None
    m = objs[0].get("motion")
    return m if m in MOTIONS else None


def video_tokens(data: Path, tower: str, split: str, limit: int, batch: int):
    """(N, tokens, d) merged video tokens of ``tower`` for up to ``limit`` one-object videos of ``split``,
    their motion labels (N,), and the video grid (t, h, w) in merged tokens."""
    import torch
    from datasets import DatasetDict, load_from_disk

    from vidspec.draft_training.data import VideoTextDataModule
    from vidspec.draft_training.sft import VLMSFTModule

    table = load_from_disk(str(data))[split]
    seen: set[str] = set()
    keep = []
    for i, (vid, facts) in enumerate(zip(table["videoID"], table["facts"])):
        if vid in seen or scene_motion(facts) is None:
            continue
        seen.add(vid)
        keep.append(i)
        if len(keep) >= limit:
            break
    if not keep:
        fail(f"no one-object scenes in split {split!r} of {data}")
    rows = table.select(keep)
    labels = torch.tensor([MOTIONS.index(scene_motion(f)) for f in rows["facts"]])
    module = VLMSFTModule(init_from=tower).eval()
    if module.model.config.model_type != "qwen2_5_vl":
        fail(f"{tower} is a {module.model.config.model_type} model, not Qwen2.5-VL")
    merge = module.model.config.vision_config.spatial_merge_size
    feats = []
    with tempfile.TemporaryDirectory() as tmp:
        DatasetDict({"train": rows, split: rows}).save_to_disk(str(Path(tmp) / "captions"))
        dm = VideoTextDataModule(path=tmp, tables=["captions"], val_split=split, video_root=str(data), batch_size=batch,
                                 max_val_samples=None, num_workers=0)
        dm.attach(module.input_spec())
        dm.setup("fit")
        grid = None
        with torch.no_grad():
            for b in dm.val_dataloader():
                out = module.model.model.get_video_features(b["pixel_values_videos"], b["video_grid_thw"])
                feats += [f.float() for f in out.pooler_output]
                t, h, w = b["video_grid_thw"][0].tolist()
                grid = (t, h // merge, w // merge)
    return torch.stack(feats), labels, grid


def positions(grid: tuple[int, int, int], sections, batch: int, gap: int = 0):
    """(3, B, L) positions of [vision start, video tokens..., ``gap`` text tokens, query], as ``get_rope_index``
    lays out a video (one temporal step per temporal patch: SynthVid's 4 fps, temporal patches of 2 frames and 2
    tokens a second) and the text after it, or, with ``sections`` None, 1-D indices."""
    import torch

    t, h, w = grid
    n = t * h * w + 2 + gap
    if sections is None:
        pos = torch.arange(n).view(1, 1, n).expand(3, batch, n)
        return pos.contiguous()
    from vidspec.draft_training.qwen_vision import mrope_position_ids

    # one row: the vision-start token (text), the video, then the text after it; the data module's own M-RoPE helper
    # (equal to get_rope_index), with a merged grid of (t, h, w) and one temporal step per temporal patch
    types = torch.tensor([[0] + [2] * (t * h * w) + [0] * (gap + 1)], dtype=torch.int32)
    pos, _ = mrope_position_ids(torch.zeros(1, n, dtype=torch.long), types, torch.tensor([[t, 2 * h, 2 * w]]),
                                torch.tensor([1.0]), None, spatial_merge_size=2, tokens_per_second=1)
    return pos.expand(3, batch, n).contiguous()


def train_one(cfg: dict, x, y, xt, yt, grid, args) -> dict:
    import torch
    from transformers import Qwen2_5_VLTextConfig
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLTextModel

    from vidspec.draft_training.arch import default_mrope_section

    torch.manual_seed(args.seed)
    d = args.hidden
    head_half = d // args.heads // 2
    sections = cfg["sections"] or default_mrope_section(d // args.heads)  # 1-D positions: any bands give the same
    if sum(sections) != head_half:
        fail(f"sections {sections} must add up to half a head ({head_half})")
    conf = Qwen2_5_VLTextConfig(vocab_size=8, hidden_size=d, intermediate_size=4 * d, num_hidden_layers=args.layers,
                                num_attention_heads=args.heads, num_key_value_heads=args.heads,
                                rope_parameters={"rope_type": "default", "rope_theta": cfg["base"],
                                                 "mrope_section": sections})
    lm = Qwen2_5_VLTextModel(conf)
    proj = torch.nn.Linear(x.shape[-1], d)  # the tower's merger already maps into the target's width; kept general
    start = torch.nn.Parameter(torch.randn(1, 1, d) * 0.02)
    query = torch.nn.Parameter(torch.randn(1, 1, d) * 0.02)
    filler = torch.nn.Parameter(torch.randn(1, 1, d) * 0.02)  # the text between the video and the query (--gap)
    head = torch.nn.Linear(d, len(MOTIONS))
    params = [*lm.parameters(), *proj.parameters(), *head.parameters(), start, query, filler]
    gaps = torch.Generator().manual_seed(args.seed + 1)

    def draw_gap() -> int:
        lo = min(args.gap_min, args.gap)
        return lo + int(torch.randint(args.gap - lo + 1, (1,), generator=gaps)) if args.gap else 0
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50))

    def logits(xb):
        b, gap = xb.shape[0], draw_gap()
        emb = torch.cat([start.expand(b, 1, d), proj(xb), filler.expand(b, gap, d), query.expand(b, 1, d)], 1)
        out = lm(inputs_embeds=emb, position_ids=positions(grid, cfg["sections"], b, gap), use_cache=False)
        return head(out.last_hidden_state[:, -1])

    def evaluate():
        lm.eval()
        with torch.no_grad():
            pred = torch.cat([logits(xt[i:i + 32]).argmax(-1) for i in range(0, len(xt), 32)])
        lm.train()
        acc = (pred == yt).float()
        per = {m: float(acc[yt == k].mean()) for k, m in enumerate(MOTIONS) if (yt == k).any()}
        return float(acc.mean()), per

    g = torch.Generator().manual_seed(args.seed)
    curve = []
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        idx = torch.randint(len(x), (args.batch,), generator=g)
        loss = torch.nn.functional.cross_entropy(logits(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % args.every == 0 or step == args.steps:
            acc, per = evaluate()
            curve.append({"step": step, "loss": float(loss), "accuracy": acc, "per_motion": per,
                          "seconds": time.perf_counter() - t0})
            print(f"  {cfg['name']:>16} step {step:5d} loss {float(loss):.3f} held-out {acc:.3f} "
                  + " ".join(f"{m} {v:.2f}" for m, v in per.items()), flush=True)
    return {"config": cfg, "sections": cfg["sections"], "curve": curve, "final": curve[-1]["accuracy"]}


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="a SynthVid folder")
    ap.add_argument("--tower", required=True, help="a Qwen2.5-VL release or stage (vidspec export)")
    ap.add_argument("--configs", default="s8-8-8_b10000,1d_b10000,s2-2-20_b10000,s2-2-20_b100")
    ap.add_argument("--train-split", default="train")
    ap.add_argument("--test-split", default="validation")
    ap.add_argument("--train-videos", type=int, default=3000)
    ap.add_argument("--test-videos", type=int, default=500)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=96)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--every", type=int, default=250)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gap", type=int, default=0,
                    help="text tokens between the video and the query: a random number in [0, GAP] each batch (a "
                         "caption's motion word is some way after the video, at a distance that varies)")
    ap.add_argument("--gap-min", type=int, default=0, help="the fewest text tokens --gap draws")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    configs = [parse_config(c) for c in args.configs.split(",") if c]
    t0 = time.perf_counter()
    if not (Path(args.tower) / "config.json").is_file():
        fail(f"no model at --tower {args.tower} (want a vidspec export folder)")
    x, y, grid = video_tokens(Path(args.data), args.tower, args.train_split, args.train_videos, 32)
    xt, yt, _ = video_tokens(Path(args.data), args.tower, args.test_split, args.test_videos, 32)
    print(f"video tokens: train {tuple(x.shape)}, held-out {tuple(xt.shape)}, grid {grid} "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    report = {"data": args.data, "tower": args.tower, "grid_t_h_w": grid, "train_videos": len(x),
              "test_videos": len(xt), "chance": float(torch.bincount(yt).max()) / len(yt),
              "args": vars(args), "machine": {"python": platform.python_version(), "torch": torch.__version__,
                                              "cpu": platform.machine(), "threads": torch.get_num_threads()},
              "results": []}
    for cfg in configs:
        report["results"].append(train_one(cfg, x, y, xt, yt, grid, args))
    emit_json(report, args.out)


if __name__ == "__main__":
    main()
