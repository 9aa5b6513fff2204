"""Op count of one SFT loss + backward (RESULTS 25, the closing note's "noticed"): aten ops and ops that read the device
back (nonzero, item, ...), for the release-size LLaVA-OV or Qwen2.5-VL target at a given batch size, on CPU.

    cd /work/main && OMP_NUM_THREADS=2 .venv/bin/python benchmarks/results/gpu_session18/cpu/sft_opcount/opcount.py \
        llava-ov 8      (and 16; DATA below is a SynthVid set with a frame cache: vidspec data synthvid, seed 0)

Session 18: llava-ov at batch 8 and 16 alike: 1764 ops, 5 that read the device back.
"""
import collections
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from vidspec.draft_training.arch import ArchConfig
from vidspec.draft_training.data import VideoTextDataModule
from vidspec.draft_training.sft import VLMSFTModule

torch.set_num_threads(2)
fam = sys.argv[1]
bs = int(sys.argv[2])
data = sys.argv[3] if len(sys.argv) > 3 else "/tmp/v2/train12k"  # DATA
if fam == "llava-ov":
    arch = ArchConfig(family="llava-ov", hidden_size=192, num_layers=6, num_heads=6, num_kv_heads=2, vision_hidden_size=128, vision_layers=4, vision_heads=4, image_size=64, patch_size=8)
    opts = None
else:
    arch = ArchConfig(family="qwen2.5-vl", hidden_size=192, num_layers=6, num_heads=6, num_kv_heads=2, vision_hidden_size=128, vision_layers=4, vision_heads=4, image_size=64, patch_size=8)
    opts = {"min_pixels": 4096, "max_pixels": 4096}
torch.manual_seed(0)
m = VLMSFTModule(tokenizer=data + "/tokenizer", arch=arch, max_frames=8, adapter_options=opts, freeze_vision=True)
dm = VideoTextDataModule(data, tables=["."], batch_size=bs, shuffle=False, num_workers=0, frame_cache=data + "/frames")
dm.attach(m.input_spec())
dm.setup("fit")
batch = next(iter(dm.train_dataloader()))
class Count(TorchDispatchMode):
    def __init__(s):
        super().__init__()
        s.c = collections.Counter()

    def __torch_dispatch__(s, func, types, args=(), kwargs=None):
        s.c[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))
loss, _ = m.loss(batch)
loss.backward()
m.zero_grad()
with Count() as c:
    loss, _ = m.loss(batch)
    loss.backward()
tot = sum(c.c.values())
sync = sum(v for k, v in c.c.items() if any(x in k for x in ("_local_scalar_dense", "nonzero", "item", "unique", "masked_select", "repeat_interleave")))
print(fam, bs, "ops", tot, "sync-ish", sync)
print(c.c.most_common(25))
