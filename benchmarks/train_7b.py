"""Sparrow training at 7B shape on one GPU: each 7B recipe under DDP and FSDP, online target and feature cache.

Run from the repository root on the GPU machine (the packages need not be pip-installed; put their sources on
PYTHONPATH; torch, transformers, lightning, safetensors and tqdm are needed, not datasets or jsonargparse)::

    PYTHONPATH=packages/decoding/src:packages/draft_training/src:packages/evaluation/src \\
        python benchmarks/train_7b.py --out "$OUT"          # both recipes, ~8 min on one H100
    python benchmarks/train_7b.py --smoke --out OUT          # tiny shape on the CPU, seconds (the smoke test)

What it does, per recipe (configs/train/sparrow-qwen2.5-vl-7b.yaml, sparrow-llava-ov-7b.yaml):

- The target: random bf16 weights drawn from the real Qwen2.5-VL-7B / LLaVA-OneVision-7B configs (built here from
  their published sizes, no hub; special token ids from vidspec's tiny tokenizer, which is saved beside them),
  saved as a Hugging Face folder and loaded by :class:`SparrowDistillModule` from it, the module built from the
  recipe's ``model.init_args`` (target and data paths swapped).
- Batches: the project's dataset code (:class:`VideoTextDataset` over random frames, the target's own
  preprocessing) and :class:`Collator`, ``data.batch_size`` rows each: short batches of ~2,048 visual + prompt +
  1,024 answer tokens a row, and every ``--long-every``-th batch rows of ~25k visual tokens (Qwen2.5-VL: 64
  frames at 784x784; LLaVA-OV: 128 frames at 384x384).
- Runs: the recipe's precision and ``gradient_clip_val`` under DDP and under the recipe's DraftFSDPStrategy
  (``devices=1``), with the target online and from a feature cache built first with ``precompute_features``,
  ``--steps`` optimizer steps each. A recorder checks, during a step, that the draft's RoPE buffer is float32, its
  positions and the target's features equal those computed as at inference, and the gradient norm after clipping.
  The cache is built with the target on the GPU (the first module, used for the samples, distill-data and the cache,
  is freed before the runs, so no idle copy of the target counts in their peak memory).
- ``--modes distill``: distill-data's batched generation on the target, generated tokens/s, before the runs.

Reported per run (medians over the steps after ``--warmup``, short and long batches apart): step time, text and
total tokens/s, the target forward's time and share of the step, its TFLOP/s and fraction of the GPU's bf16 dense
peak, the draft's model-FLOPs utilisation (its forward and backward FLOPs per MTP step, recomputation not counted,
over the step time outside the target forward), peak memory. Goals printed beside them: online step <= 1.2x the
target forward, target forward >= 50% of bf16 peak. Output: ``train_7b.json`` in ``--out`` with machine info and
the git SHA (``VIDSPEC_GIT_SHA`` wins, for a copied tree).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine_gpu import QWEN_TEXT, QWEN_VISION, ROPE, SIGLIP  # noqa: E402

#: dense bf16 tensor-core peak (FLOP/s) by GPU name fragment (SXM parts, no sparsity)
BF16_PEAK = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12}
RECIPES = {"qwen2.5-vl": "configs/train/sparrow-qwen2.5-vl-7b.yaml", "llava-ov": "configs/train/sparrow-llava-ov-7b.yaml"}
#: frames, frame size (px) of the short and long rows, per family
SHAPES = {"qwen2.5-vl": {"short": (16, 448), "long": (64, 784)}, "llava-ov": {"short": (10, 384), "long": (128, 384)}}
SMOKE_SHAPES = {"qwen2.5-vl": {"short": (2, 56), "long": (4, 56)}, "llava-ov": {"short": (2, 56), "long": (4, 56)}}


# ---- the target folder ---------------------------------------------------------------------------------------
def target_config(family: str, tokenizer, smoke: bool):
    """The real 7B config of ``family`` (the tiny one with ``smoke``), special token ids of ``tokenizer``."""
    import transformers

    from vidspec.decoding.models.tiny import SPECIAL_TOKENS, tiny_llava_config, tiny_qwen_config

    if smoke:
        return (tiny_qwen_config if family == "qwen2.5-vl" else tiny_llava_config)(tokenizer, 2)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    special = dict(bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"])
    if family == "qwen2.5-vl":
        return transformers.Qwen2_5_VLConfig(
            text_config=dict(QWEN_TEXT, rope_parameters=dict(ROPE, mrope_section=[16, 24, 24]), **special),
            vision_config=QWEN_VISION, image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
            vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
            tie_word_embeddings=False)
    return transformers.LlavaOnevisionConfig(
        text_config=dict(QWEN_TEXT, model_type="qwen2", rope_parameters=ROPE, **special), vision_config=SIGLIP,
        image_token_index=ids["<image>"], video_token_index=ids["<video>"], vision_feature_layer=-1,
        vision_feature_select_strategy="full", tie_word_embeddings=False)


def write_target(family: str, out: Path, device: str, smoke: bool) -> Path:
    """Random weights drawn by HF's initialiser on ``device`` (bf16 on GPU), saved as an HF folder with the
    tokenizer and the adapter options the long rows need."""
    import transformers

    from vidspec.decoding.models import FAMILIES
    from vidspec.decoding.models.tiny import load_tiny_tokenizer

    tok = load_tiny_tokenizer()
    cfg = target_config(family, tok, smoke)
    cfg._attn_implementation = "sdpa"
    cls = getattr(transformers, FAMILIES[cfg.model_type][1])
    torch.manual_seed(0)
    with torch.device(device):
        model = cls._from_config(cfg, dtype=torch.bfloat16 if device == "cuda" else torch.float32)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    shapes = (SMOKE_SHAPES if smoke else SHAPES)[family]
    frames, px = shapes["long"]
    opts = {"min_pixels": 56 * 56, "max_pixels": px * px} if family == "qwen2.5-vl" else {}
    (out / "vidspec.json").write_text(json.dumps({"adapter_options": opts, "max_frames": frames}))
    del model
    gc.collect()
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return out


# ---- synthetic batches through the project's dataset code and Collator ---------------------------------------
def make_samples(module, family: str, n_short: int, n_long: int, answer_tokens: int, smoke: bool) -> dict:
    """``{"short": [...], "long": [...]}`` samples (dicts of one example) from VideoTextDataset over random frames."""
    import numpy as np

    from vidspec.decoding.types import VideoClip
    from vidspec.draft_training.data import InputSpec, Row, VideoTextDataset

    spec = module.input_spec()
    tok = spec.tokenizer
    rng = np.random.default_rng(0)
    words = [w for w in "the red circle moves to the left while a blue square grows slowly in the middle and a "
             "green triangle turns around it before the camera pans right".split()]
    text = ""
    while len(tok(text, add_special_tokens=False)["input_ids"]) < answer_tokens:
        text += " " + " ".join(rng.choice(words, 32))
    ids = tok(text, add_special_tokens=False)["input_ids"][: answer_tokens - 1]
    answer = tok.decode(ids)
    out = {}
    shapes = (SMOKE_SHAPES if smoke else SHAPES)[family]
    for kind, n in (("short", n_short), ("long", n_long)):
        frames, px = shapes[kind]
        opts = dict(spec.adapter_options)
        if family == "qwen2.5-vl":
            opts["max_pixels"] = px * px
        kspec = InputSpec(spec.hf_config, tok, frames, opts)
        ds = VideoTextDataset([Row(prompt="Describe the video in detail.", answer=answer, video=f"{kind}{i}.mp4")
                               for i in range(n)], kspec)
        clips = {f"{kind}{i}.mp4": VideoClip(frames=rng.integers(0, 255, (frames, px, px, 3), dtype=np.uint8),
                                             fps=2.0, source="memory") for i in range(n)}
        ds._read = clips.__getitem__  # random frames instead of decoded files
        out[kind] = [ds[i] for i in range(n)]
    return out


class Batches(torch.utils.data.Dataset):
    """``steps`` batches of ``batch_size`` rows: every ``long_every``-th one of long rows, the others short."""

    def __init__(self, samples: dict, collate, steps: int, batch_size: int, long_every: int):
        self.samples, self.collate, self.steps, self.bs, self.every = samples, collate, steps, batch_size, long_every

    def is_long(self, i: int) -> bool:
        return self.every > 0 and bool(self.samples["long"]) and i % self.every == self.every - 1

    def __len__(self) -> int:
        return self.steps

    def __getitem__(self, i: int) -> dict:
        pool = self.samples["long" if self.is_long(i) else "short"]
        return self.collate([pool[(i * self.bs + j) % len(pool)] for j in range(self.bs)])


# ---- FLOPs -------------------------------------------------------------------------------------------------
def lm_layer_flops(cfg, tokens: int, attn_pairs: float) -> float:
    """Forward FLOPs of one decoder layer of text config ``cfg`` over ``tokens`` with ``attn_pairs`` (q, k) pairs."""
    d, ff = cfg.hidden_size, cfg.intermediate_size
    kv = cfg.num_key_value_heads * (d // cfg.num_attention_heads)
    return 2 * tokens * (2 * d * d + 2 * d * kv + 3 * d * ff) + 4 * attn_pairs * d


def vision_flops(family: str, vcfg, batch: dict) -> float:
    """Forward FLOPs of the vision tower (and merger / projector, approximately) for the batch's videos."""
    if family == "qwen2.5-vl":
        grid = batch["video_grid_thw"]
        h_, ff = vcfg.hidden_size, vcfg.intermediate_size
        flops = 0.0
        for t, h, w in grid.tolist():
            p = t * h * w
            win = (vcfg.window_size // vcfg.patch_size) ** 2
            full = len(vcfg.fullatt_block_indexes)
            dense = 2 * p * (4 * h_ * h_ + 3 * h_ * ff) * vcfg.depth
            attn = 4 * h_ * p * (win * (vcfg.depth - full) + h * w * full)
            merger = 2 * (p // 4) * (4 * h_ * 4 * h_ + 4 * h_ * vcfg.out_hidden_size)
            flops += dense + attn + merger + 2 * p * vcfg.in_channels * vcfg.temporal_patch_size * vcfg.patch_size**2 * h_
        return flops
    pv = batch["pixel_values_videos"]
    frames = pv.shape[0] * pv.shape[1] if pv.ndim == 5 else pv.shape[0]
    n = (vcfg.image_size // vcfg.patch_size) ** 2
    h_, ff = vcfg.hidden_size, vcfg.intermediate_size
    per_frame = vcfg.num_hidden_layers * (2 * n * (4 * h_ * h_ + 2 * h_ * ff) + 4 * n * n * h_)
    return frames * per_frame


def target_forward_flops(family: str, tcfg, batch: dict) -> float:
    text = tcfg.get_text_config()
    lens = batch["attention_mask"].sum(-1).tolist()
    lm = sum(text.num_hidden_layers * lm_layer_flops(text, n, n * (n + 1) / 2) for n in lens)
    return lm + vision_flops(family, tcfg.vision_config, batch)


def draft_step_flops(module, db_sizes: dict) -> float:
    """Forward + backward FLOPs of the draft per optimizer step (3x forward: input and weight gradients; the
    frozen LM head 3x too, since its input gradient is needed; recomputation under checkpointing not counted)."""
    text = module.draft.text_config
    d, V = text.hidden_size, module.draft.config.vocab_size
    S, B, n_sel = db_sizes["S"], db_sizes["B"], db_sizes["sel"]
    per_step = (B * lm_layer_flops(text, S, S * (S + 1) / 2) + 2 * B * S * 2 * d * d  # layer + fusion FC
                + 2 * n_sel * d * V)  # LM head at the supervised positions
    return 3 * per_step * module.loss_cfg.mtp_steps


# ---- one run ------------------------------------------------------------------------------------------------
class StepTimer:
    """Lightning callback: wall time (synchronised), target-forward time (CUDA events), peak memory, per step."""

    def __init__(self, module, family: str, cuda: bool):
        import lightning as L

        timer = self

        class _CB(L.Callback):
            def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
                timer.start(batch)

            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
                timer.end(batch)

        self.callback = _CB()
        self.module, self.family, self.cuda = module, family, cuda
        self.rows: list[dict] = []
        self._t0 = 0.0
        self._target_s = 0.0
        self._db: dict = {}
        features, draft_batch = module.target_features, module.draft_batch

        def timed_features(batch, **kw):
            self.sync()
            t = time.perf_counter()
            out = features(batch, **kw)
            self.sync()
            self._target_s += time.perf_counter() - t
            return out

        def sized_draft_batch(batch, feats):
            db = draft_batch(batch, feats)
            self._db = {"S": db.vis.shape[1] + db.tokens.shape[1], "B": db.tokens.shape[0], "sel": int(db.sel.sum())}
            return db

        module.target_features, module.draft_batch = timed_features, sized_draft_batch

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def start(self, batch) -> None:
        self.sync()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        self._target_s = 0.0
        self._t0 = time.perf_counter()

    def end(self, batch) -> None:
        self.sync()
        dt = time.perf_counter() - self._t0
        mask = batch["attention_mask"].bool()
        text = int((mask & (batch["input_ids"] != self.module.target.video_token_id)).sum())
        self.rows.append({
            "step_s": dt, "target_s": self._target_s, "tokens": int(mask.sum()), "text_tokens": text,
            "visual_tokens": int(mask.sum()) - text, "rows": int(mask.shape[0]),
            "target_flops": target_forward_flops(self.family, self.module.target.model.config, batch),
            "draft_flops": draft_step_flops(self.module, self._db) if self._db else 0.0,
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if self.cuda else None,
        })


def summarise(rows: list[dict], long_flags: list[bool], warmup: int, peak: float | None) -> dict:
    out = {}
    for kind, want in (("short", False), ("long", True)):
        rs = [r for i, (r, lg) in enumerate(zip(rows, long_flags)) if lg == want and i >= warmup]
        if not rs:
            continue
        med = {k: statistics.median(r[k] for r in rs) for k in ("step_s", "target_s", "tokens", "text_tokens",
                                                                  "visual_tokens", "target_flops", "draft_flops")}
        step, tgt = med["step_s"], med["target_s"]
        s = {"steps": len(rs), "rows_per_batch": rs[0]["rows"], "tokens_per_batch": med["tokens"],
             "visual_tokens_per_batch": med["visual_tokens"], "text_tokens_per_batch": med["text_tokens"],
             "step_s": round(step, 4), "text_tokens_per_s": round(med["text_tokens"] / step, 1),
             "tokens_per_s": round(med["tokens"] / step, 1), "target_forward_s": round(tgt, 4),
             "target_share": round(tgt / step, 3), "step_over_target_forward": round(step / tgt, 3) if tgt else None,
             "peak_mem_gib": round(max(r["peak_gib"] for r in rs), 2) if rs[0]["peak_gib"] is not None else None}
        if tgt:
            s["target_forward_tflops"] = round(med["target_flops"] / tgt / 1e12, 1)
        draft_s = step - tgt
        s["draft_s"] = round(draft_s, 4)
        s["draft_tflops"] = round(med["draft_flops"] / draft_s / 1e12, 2) if draft_s > 0 else None
        if peak:
            if tgt:
                s["target_forward_frac_of_peak"] = round(med["target_flops"] / tgt / peak, 3)
            s["draft_mfu"] = round(med["draft_flops"] / draft_s / peak, 3) if draft_s > 0 else None
        out[kind] = s
    return out


def bench_distill(module, family: str, args) -> dict:
    """``vidspec distill-data``'s batched path (:func:`batched_answers`) on the 7B-shaped target: short-shape
    videos, ``--distill-batch`` requests a call, ``--distill-tokens`` new tokens each; generated tokens/s."""
    import numpy as np

    from vidspec.decoding.types import Request, VideoClip
    from vidspec.draft_training.sparrow.distill_data import batched_answers

    tgt = module.target
    tgt.model.to(module._target_device("auto") if not args.smoke else "cpu")
    frames, px = (SMOKE_SHAPES if args.smoke else SHAPES)[family]["short"]
    rng = np.random.default_rng(1)
    reqs = [Request("Describe the video in detail.", VideoClip(
        frames=rng.integers(0, 255, (frames, px, px, 3), dtype=np.uint8), fps=2.0, source="memory"))
        for _ in range(args.distill_batch)]
    out = {"batch": args.distill_batch, "max_new_tokens": args.distill_tokens, "frames": frames, "px": px}
    for label, b in (("batched", args.distill_batch), ("one_request", 1)):
        batched_answers(tgt, reqs[:b], 4)  # warm-up
        cuda = torch.cuda.is_available() and not args.smoke
        torch.cuda.synchronize() if cuda else None
        t = time.perf_counter()
        answers = batched_answers(tgt, reqs[:b], args.distill_tokens)
        torch.cuda.synchronize() if cuda else None
        dt = time.perf_counter() - t
        n = sum(k for _, k in answers)
        out[label] = {"requests": b, "new_tokens": n, "s": round(dt, 3), "new_tokens_per_s": round(n / dt, 1)}
    return out


def build_module(recipe: dict, target: Path, feature_cache: str | None, smoke: bool):
    from vidspec.draft_training.sparrow import SparrowDistillModule

    init = dict(recipe["model"]["init_args"])
    init.update(target=str(target), feature_cache=feature_cache)
    if smoke:
        init["target_dtype"] = "float32"
    return SparrowDistillModule(**init)


def make_strategy(recipe: dict, name: str):
    from lightning.pytorch.strategies import DDPStrategy

    from vidspec.draft_training.strategies import DraftFSDPStrategy

    if name == "ddp":
        return DDPStrategy()
    st = recipe["trainer"]["strategy"]
    assert st["class_path"].endswith("DraftFSDPStrategy"), st
    return DraftFSDPStrategy(**st.get("init_args", {}))


def run_one(recipe: dict, module, samples: dict, strategy: str, args, out: Path, peak: float | None) -> dict:
    import lightning as L

    from vidspec.draft_training.data import Collator
    from vidspec.draft_training.testing import RecordSparrowStep

    cuda = torch.cuda.is_available() and not args.smoke
    out.mkdir(parents=True, exist_ok=True)
    tr = recipe["trainer"]
    bs = recipe["data"]["batch_size"]
    collate = Collator(module.target.tokenizer.pad_token_id or 0, module.target.family,
                       recipe["data"].get("pad_to_multiple_of", 1))
    batches = Batches(samples, collate, args.steps, bs, args.long_every)
    loader = torch.utils.data.DataLoader(batches, batch_size=None, shuffle=False, num_workers=0)
    timer = StepTimer(module, module.target.family, cuda)
    record = RecordSparrowStep(str(out / "record.json"))
    trainer = L.Trainer(
        accelerator="gpu" if cuda else "cpu", devices=1, strategy=make_strategy(recipe, strategy),
        precision=tr["precision"], gradient_clip_val=tr["gradient_clip_val"], max_steps=args.steps,
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, limit_val_batches=0, callbacks=[record, timer.callback],
        use_distributed_sampler=False,  # keep the batch order: every long_every-th batch is the long one
        default_root_dir=str(out))
    t0 = time.perf_counter()
    trainer.fit(module, train_dataloaders=loader)
    wall = time.perf_counter() - t0
    rec = json.loads((out / "record.json").read_text())
    # long or short by content (the batch's visual tokens), whatever order the loader gave
    cut = (max(r["visual_tokens"] for r in timer.rows) + min(r["visual_tokens"] for r in timer.rows)) / 2
    flags = [r["visual_tokens"] > cut and r["visual_tokens"] > 0 for r in timer.rows]
    if len({r["visual_tokens"] for r in timer.rows}) == 1:
        flags = [False] * len(timer.rows)
    return {"strategy": type(trainer.strategy).__name__, "precision": tr["precision"],
            "gradient_clip_val": tr["gradient_clip_val"], "optimizer_steps": trainer.global_step, "wall_s": round(wall, 1),
            "record": {k: v for k, v in rec.items() if k != "grad_norms_after_clip"},
            "max_grad_norm_after_clip": max(rec["grad_norms_after_clip"]) if rec["grad_norms_after_clip"] else None,
            **summarise(timer.rows, flags, args.warmup, peak),
            "per_step": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()
                          if k in ("step_s", "target_s", "visual_tokens", "text_tokens", "peak_gib")}
                         for r in timer.rows]}


def bench_family(family: str, args, work: Path, peak: float | None, res: dict, save=lambda: None) -> dict:
    from vidspec.draft_training.sparrow.features import precompute_features

    recipe = yaml.safe_load((ROOT / RECIPES[family]).read_text())
    device = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
    t = time.perf_counter()
    target = write_target(family, work / f"target-{family}", device, args.smoke)
    res.update({"recipe": RECIPES[family], "target_folder_write_s": round(time.perf_counter() - t, 1), "runs": {}})
    print(f"== {family}: target folder written in {res['target_folder_write_s']} s", flush=True)
    module = build_module(recipe, target, None, args.smoke)
    samples = make_samples(module, family, n_short=args.distinct, n_long=args.distinct_long,
                           answer_tokens=args.answer_tokens, smoke=args.smoke)
    res["example_tokens"] = {k: [int(s["input_ids"].shape[0]) for s in v] for k, v in samples.items()}
    cache = work / f"features-{family}"
    if "distill" in args.modes:
        res["distill_data"] = bench_distill(module, family, args)
        print(json.dumps({"distill_data": res["distill_data"]}), flush=True)
        save()
    if "cache" in args.modes:
        from vidspec.draft_training.data import Collator

        col = Collator(module.target.tokenizer.pad_token_id or 0, family, 1)
        module.target.model.to(device)
        t = time.perf_counter()
        # the target runs where it is (the GPU); this module's draft was never placed and sits on the CPU
        precompute_features(module, [col([s]) for s in samples["short"] + samples["long"]], cache, progress=False)
        res["feature_cache"] = {"build_s": round(time.perf_counter() - t, 1), "target_device": str(module.target.device),
                                "bytes": sum(f.stat().st_size for f in cache.glob("*.safetensors")),
                                "examples": len(samples["short"]) + len(samples["long"])}
        print(json.dumps({"feature_cache": res["feature_cache"]}), flush=True)
        save()
    # The runs build their own modules: this one's target would otherwise sit in GPU memory beside theirs and
    # count in their peak memory.
    del module
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        res["gpu_mem_before_runs_gib"] = round(torch.cuda.memory_allocated() / 2**30, 2)
    for mode in [m for m in args.modes if m != "distill"]:
        for strategy in args.strategies:
            key = f"{strategy}-{mode}"
            m = build_module(recipe, target, str(cache) if mode == "cache" else None, args.smoke)
            print(f"-- {family} {key}: {args.steps} steps", flush=True)
            try:
                r = run_one(recipe, m, samples, strategy, args, work / f"{family}-{key}", peak)
            except Exception as e:  # noqa: BLE001 -- a failing run is recorded and the others go on
                import traceback

                traceback.print_exc()
                r = {"error": f"{type(e).__name__}: {e}"[:2000]}
            res["runs"][key] = r
            save()
            print(json.dumps({key: r}, indent=None)[:1500], flush=True)
            del m
            gc.collect()
            if device == "cuda":
                torch.cuda.empty_cache()
    import shutil

    shutil.rmtree(target, ignore_errors=True)  # 16 GB a 7B folder: one at a time on the disk
    shutil.rmtree(cache, ignore_errors=True)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--families", default="qwen2.5-vl,llava-ov")
    ap.add_argument("--strategies", default="ddp,fsdp")
    ap.add_argument("--modes", default="online,cache,distill",
                    help="online / cache: training runs; distill: distill-data's batched generation tokens/s")
    ap.add_argument("--distill-batch", type=int, default=8)
    ap.add_argument("--distill-tokens", type=int, default=256)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--long-every", type=int, default=10, help="every N-th batch has ~25k visual tokens a row")
    ap.add_argument("--distinct", type=int, default=4, help="distinct short examples (cycled)")
    ap.add_argument("--distinct-long", type=int, default=2, help="distinct long examples (cycled)")
    ap.add_argument("--answer-tokens", type=int, default=1024)
    ap.add_argument("--smoke", action="store_true", help="tiny shape on the CPU, DDP only (FSDP needs a GPU)")
    ap.add_argument("--work", default=None, help="folder for the target folders and feature caches (default: temp)")
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args(argv)
    args.families = args.families.split(",")
    args.strategies = args.strategies.split(",")
    args.modes = args.modes.split(",")
    if args.smoke:
        args.steps, args.warmup, args.long_every = min(args.steps, 4), 0, 2
        args.distinct, args.distinct_long, args.answer_tokens = 2, 1, 24
        args.distill_batch, args.distill_tokens = 2, 6
        args.strategies = [s for s in args.strategies if s != "fsdp"]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    from vidspec.evaluation.runner import git_info, machine_info

    cuda = torch.cuda.is_available() and not args.smoke
    name = torch.cuda.get_device_name() if cuda else "cpu"
    peak = next((v for k, v in BF16_PEAK.items() if k in name), None) if cuda else None
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"benchmark": "train_7b", "command": "python benchmarks/train_7b.py " + " ".join(argv or sys.argv[1:]),
              "machine": machine_info("cuda" if cuda else "cpu"), "git": git_info(ROOT), "gpu": name,
              "bf16_peak_flops": peak, "smoke": args.smoke, "steps": args.steps, "warmup_steps_excluded": args.warmup,
              "long_every": args.long_every, "goals": {"online_step_over_target_forward_max": 1.2,
                                                       "target_forward_frac_of_peak_min": 0.5},
              "families": {}}
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        for family in args.families:
            def save():
                (out / "train_7b.json").write_text(json.dumps(result, indent=1))

            result["families"][family] = {}
            bench_family(family, args, Path(tmp), peak, result["families"][family], save)
            save()
    print_table(result)
    (out / "train_7b.json").write_text(json.dumps(result, indent=1))
    print(f"wrote {out / 'train_7b.json'}")
    return 0


def print_table(result: dict) -> None:
    print(f"\n{'recipe':12} {'run':12} {'kind':5} {'step s':>7} {'text tok/s':>10} {'tgt share':>9} "
          f"{'step/tgt':>8} {'tgt %peak':>9} {'draft MFU':>9} {'peak GiB':>8}")
    for fam, fr in result["families"].items():
        for key, r in fr["runs"].items():
            if "error" in r:
                print(f"{fam:12} {key:12} error: {r['error'][:80]}")
                continue
            for kind in ("short", "long"):
                s = r.get(kind)
                if s:
                    print(f"{fam:12} {key:12} {kind:5} {s['step_s']:7.3f} {s['text_tokens_per_s']:10.0f} "
                          f"{s['target_share']:9.2f} {s['step_over_target_forward'] or 0:8.2f} "
                          f"{s.get('target_forward_frac_of_peak', 0) or 0:9.2f} {s.get('draft_mfu', 0) or 0:9.3f} "
                          f"{s['peak_mem_gib'] or 0:8.1f}")


if __name__ == "__main__":
    sys.exit(main())
