"""Why does Qwen2.5-VL's vision tower learn SynthVid shape slowly? Tiny towers (h64_l2_p8, heads 2, lr 2e-3, batch 128,
warmup 100) trained with vision_pretrain.train_tower on the same 8000/1000 scenes as gpu_session17's check; one thread.

    cd /work/main && OMP_NUM_THREADS=1 .venv/bin/python \
        benchmarks/results/gpu_session18/cpu/qwen_shape/qwen_shape_check.py VARIANT STEPS [LR]
    VARIANT: siglip | siglip_nopos | qwen | qwen_xavier | qwen_xavier_attn | qwen_patch | qwen_nh1 | qwen_theta<T>[_xavier]
             | qwen_irange | qwen_abspos | qwen_lr<LR> | order
    (`order` runs the patch-order sanity check, no training). Writes qwen_shape_<VARIANT>_<STEPS>[_lr<LR>].json beside this file.
    The scenes are cached in /tmp/qwen_shape_data.pt (same seeds as make_data(8000, 0) / make_data(1000, 1)).
"""
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))  # benchmarks/
sys.path.insert(0, str(Path(__file__).resolve().parent))  # qwen_shape_check_lib
from qwen_shape_check_lib import siglip_style_init
from vision_learnability import arch_of, make_data, parse_config

from vidspec.draft_training import vision_pretrain as vp

HERE = Path(__file__).resolve().parent
variant = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 0
lr_arg = float(sys.argv[3]) if len(sys.argv) > 3 else None  # overrides the config's 2e-3
torch.set_num_threads(1)


class Reinit(vp.QwenTowerProbe):
    WHAT = ("attn", "mlp", "patch", "merger")

    def __init__(self, arch, classes):
        super().__init__(arch, classes)
        siglip_style_init(self.tower, self.WHAT)


def order_check() -> dict:
    """Each patch's pixels encode its (row, col); patchify_batch's order must match the tower's rotary position ids
    (get_vision_position_ids) and tower_indices' window order must equal transformers' own."""
    from transformers.vision_utils import get_vision_position_ids, get_vision_window_index

    from vidspec.decoding.models.llava_onevision import CLIP_MEAN, CLIP_STD
    from vidspec.decoding.models.qwen2_5_vl import patchify_batch
    from vidspec.draft_training.qwen_vision import tower_indices

    c = parse_config("h64_l2_p8_lr2e-3")
    arch = arch_of(c, 64, "qwen2.5-vl", 192)
    probe = vp.QwenTowerProbe(arch, (6, 8, 6))
    p, g = 8, 8
    fr = torch.zeros(1, 4, 64, 64, 3, dtype=torch.uint8)
    for r in range(g):
        for q in range(g):
            fr[:, :, r * p:(r + 1) * p, q * p:(q + 1) * p, 0] = r * 10
            fr[:, :, r * p:(r + 1) * p, q * p:(q + 1) * p, 1] = q * 10
    flat = patchify_batch(fr, p)  # (2*64, 3*2*8*8), channel-major
    x = flat.view(-1, 3, 2, p, p)
    mean, std = torch.tensor(CLIP_MEAN), torch.tensor(CLIP_STD)
    rc = ((x[:, :2, 0, 0, 0] * std[:2] + mean[:2]) * 255 / 10).round().long()  # decoded (row, col) of each patch
    grid = torch.tensor([[2, g, g]])
    pos = get_vision_position_ids(grid, 2)
    w_hf, cu_hf = get_vision_window_index(grid, 2, probe.tower.window_size, p)
    pre = tower_indices(probe.tower, grid)
    out = {"patch_rc_equals_position_ids": bool((rc == pos).all()),
           "window_index_equal": bool((pre["video_window_index"] == w_hf).all()),
           "position_ids_equal": bool((pre["video_position_ids"] == pos).all()),
           "cu_window_seqlens": cu_hf.tolist(), "window_index": w_hf.tolist(),
           "inv_freq": probe.tower.rotary_pos_emb.inv_freq.tolist(),
           "rope_parameters": dict(probe.tower.config.rope_parameters)}
    # end to end: a tower output for a frame and for the frame rolled by one merged block (2 patches) to the right;
    # away from the borders, tokens of the same content must have the same output when only relative position is used
    torch.manual_seed(0)
    probe.eval()
    img = torch.randint(0, 255, (1, 4, 64, 64, 3), dtype=torch.uint8)
    img[..., :, 48:, :] = 0  # right quarter blank
    sh = torch.zeros_like(img)
    sh[..., :, 16:, :] = img[..., :, :48, :]
    with torch.no_grad():
        hs = [probe.tower(patchify_batch(v, p), grid_thw=grid, **{k.removeprefix("video_"): t for k, t in pre.items()}).last_hidden_state
              for v in (img, sh)]
    # pre-merger states are in window order == merge order here (one window); map back to (row, col)
    inv = torch.argsort(w_hf)
    st = [h.view(-1, 4, h.shape[-1])[inv].view(-1, h.shape[-1])[:64] for h in hs]
    ids = {tuple(v): i for i, v in enumerate(pos[:64].tolist())}
    a = torch.stack([st[0][ids[(r, q)]] for r in range(g) for q in range(g - 2)])
    b = torch.stack([st[1][ids[(r, q + 2)]] for r in range(g) for q in range(g - 2)])
    out["shift_equivariance_max_abs_diff"] = float((a - b).abs().max())
    out["output_scale"] = float(a.abs().mean())
    return out


if variant == "order":
    res = order_check()
    print(json.dumps(res, indent=1))
    (HERE / "qwen_shape_order.json").write_text(json.dumps(res, indent=1))
    sys.exit(0)

family, cfg, lr = "qwen2.5-vl", "h64_l2_p8_lr2e-3", lr_arg
if variant == "siglip":
    family = "llava-ov"
elif variant == "qwen_xavier":
    vp.QwenTowerProbe = Reinit
elif variant == "qwen_xavier_attn":
    Reinit.WHAT = ("attn",)
    vp.QwenTowerProbe = Reinit
elif variant == "qwen_patch":
    Reinit.WHAT = ("patch",)
    vp.QwenTowerProbe = Reinit
elif variant == "qwen_nh1":
    cfg = "h64_l2_p8_lr2e-3_n1"
elif variant == "siglip_nopos":  # diagnostic: SigLIP without its absolute position embedding (zero, frozen)
    family = "llava-ov"

    class NoPos(vp.TowerProbe):
        def __init__(self, arch, classes):
            super().__init__(arch, classes)
            pe = self.tower.get_submodule("embeddings.position_embedding").weight
            nn.init.zeros_(pe)
            pe.requires_grad_(False)

    vp.TowerProbe = NoPos
elif variant.startswith("qwen_theta"):  # the tower's 2D RoPE base (a config value: rope_parameters)
    theta = float(variant.removeprefix("qwen_theta").split("_")[0])
    base_cfg = vp.qwen_vision_config
    vp.qwen_vision_config = lambda a: {**base_cfg(a), "rope_parameters": {"rope_type": "axial", "rope_theta": theta}}
    if variant.endswith("_xavier"):
        vp.QwenTowerProbe = Reinit
elif variant == "qwen_irange":  # the config's initializer_range = 1/sqrt(hidden) instead of 0.02 (a config value)
    base_cfg2 = vp.qwen_vision_config
    vp.qwen_vision_config = lambda a: {**base_cfg2(a), "initializer_range": a.vision_hidden_size ** -0.5}
elif variant == "qwen_abspos":  # diagnostic only (not a fix: adds a parameter outside the HF class)

    class AbsPos(vp.QwenTowerProbe):
        def __init__(self, arch, classes):
            super().__init__(arch, classes)
            g = arch.image_size // arch.patch_size
            self.pos = nn.Parameter(torch.randn(g * g, arch.vision_hidden_size) / arch.vision_hidden_size ** 0.5)
            from transformers.vision_utils import get_vision_position_ids
            self._g = g

            def hook(mod, args, out):  # patch states come in merge order; add the embedding of each patch's (row, col)
                pid = get_vision_position_ids(torch.tensor([[out.shape[0] // (g * g), g, g]]), 2)
                return out + self.pos[pid[:, 0] * g + pid[:, 1]]

            self.tower.patch_embed.register_forward_hook(hook)

    vp.QwenTowerProbe = AbsPos
elif variant.startswith("qwen_lr"):
    lr = float(variant.removeprefix("qwen_lr"))
elif variant != "qwen":
    raise SystemExit(f"unknown variant {variant}")
c = parse_config(cfg)
arch = arch_of(c, 64, family, 192)
cache = Path("/tmp/qwen_shape_data.pt")
t0 = time.time()
if cache.exists():
    f, l_, y, tf, tl, ty, classes = torch.load(cache)
else:
    f, l_, y, classes = make_data(8000, 0, "easy", 64, 1)
    tf, tl, ty, _ = make_data(1000, 1, "easy", 64, 1)
    torch.save((f, l_, y, tf, tl, ty, classes), cache)
print("data", time.time() - t0, flush=True)
model, curve = vp.train_tower(arch, steps, lr or c["lr"], c["batch"], c["warmup"], "cpu", (f, l_, y), (tf, tl, ty), classes,
                              every=200, label=variant)
(HERE / (f"qwen_shape_{variant}_{steps}" + (f"_lr{lr_arg:g}" if lr_arg else "") + ".json")).write_text(json.dumps(
    {"variant": variant, "config": cfg, "lr": lr or c["lr"], "steps": steps, "curve": curve}, indent=1))
