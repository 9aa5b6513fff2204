"""A CPU check (RESULTS 24.3): does Qwen2.5-VL's tower hold shape before its merger? The pretraining probe's readout
after the merger (the mean of the first frame pair's merged tokens, QwenTowerProbe) against one before it (the mean of
the last block's patch states of the first pair), on a tiny tower (h64_l2_p8_lr2e-3), 800 steps, one thread each.

    cd /work/main && OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/gpu_session17/cpu/qwen_readout_check.py merged 800
    (and `premerge 800`); writes qwen_readout_<variant>.json in the current folder.
"""
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # benchmarks/
from vision_learnability import arch_of, make_data, parse_config

from vidspec.decoding.models.qwen2_5_vl import patchify_batch
from vidspec.draft_training import vision_pretrain as vp
from vidspec.draft_training.qwen_vision import tower_indices

variant, steps = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(1)

class PreMerge(vp.QwenTowerProbe):
    def __init__(self, arch, classes):
        super().__init__(arch, classes)
        self.shape = nn.Linear(arch.vision_hidden_size, classes[0])
        self.colour = nn.Linear(arch.vision_hidden_size, classes[1])
    def forward(self, first, last):
        b, _, h, w = first.shape
        first, last = first.permute(0, 2, 3, 1), last.permute(0, 2, 3, 1)
        clip = torch.stack([first, first, last, last], dim=1)
        grid = first.new_tensor([[2, h // self.patch, w // self.patch]], dtype=torch.long).expand(b, 3)
        pre = {k.removeprefix("video_"): v for k, v in tower_indices(self.tower, grid).items()}
        out = self.tower(patchify_batch(clip, self.patch), grid_thw=grid, **pre)
        hs = out.last_hidden_state.view(b, 2, -1, out.last_hidden_state.shape[-1])  # window order within a pair
        tok = out.pooler_output.view(b, 2, -1, out.pooler_output.shape[-1])
        pooled = hs[:, 0].mean(1)
        return self.shape(pooled), self.colour(pooled), self.motion(tok.flatten(1))

if variant == "premerge":
    vp.QwenTowerProbe = PreMerge
c = parse_config("h64_l2_p8_lr2e-3")
arch = arch_of(c, 64, "qwen2.5-vl", 192)
t0 = time.time()
f, l_, y, classes = make_data(8000, 0, "easy", 64, 1)
tf, tl, ty, _ = make_data(1000, 1, "easy", 64, 1)
print("data", time.time() - t0, flush=True)
model, curve = vp.train_tower(arch, steps, c["lr"], c["batch"], c["warmup"], "cpu", (f, l_, y), (tf, tl, ty), classes,
                              every=200, label=variant)
json.dump({"variant": variant, "curve": curve}, open(f"qwen_readout_{variant}.json", "w"), indent=1)
