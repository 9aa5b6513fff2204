"""Init scales (RMS of patch embedding and of each block's attention / MLP output) of the tiny towers on 16 scenes.
    cd /work/main && OMP_NUM_THREADS=1 PYTHONPATH=benchmarks/results/gpu_session18/cpu/qwen_shape .venv/bin/python benchmarks/results/gpu_session18/cpu/qwen_shape/qs_scales.py
(needs /tmp/qwen_shape_data.pt, made by qwen_shape_check.py)."""
import sys

import torch

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "benchmarks/results/gpu_session18/cpu/qwen_shape")
import qwen_shape_check_lib as L  # noqa: E402
from vision_learnability import arch_of, parse_config  # noqa: E402

from vidspec.draft_training import vision_pretrain as vp  # noqa: E402

torch.set_num_threads(1)

f, l_, y, tf, tl, ty, classes = torch.load("/tmp/qwen_shape_data.pt")
c = parse_config("h64_l2_p8_lr2e-3")
res = {}
def run(name, probe, blocks, embed):
    st = {}
    hooks = [embed.register_forward_hook(lambda m, a, o: st.__setitem__("embed", float(o.pow(2).mean().sqrt())))]
    for i, b in enumerate(blocks):
        attn = getattr(b, "attn", None) or b.self_attn
        mlp = b.mlp
        hooks.append(attn.register_forward_hook(lambda m, a, o, i=i: st.__setitem__(f"attn{i}", float((o[0] if isinstance(o, tuple) else o).pow(2).mean().sqrt()))))
        hooks.append(mlp.register_forward_hook(lambda m, a, o, i=i: st.__setitem__(f"mlp{i}", float(o.pow(2).mean().sqrt()))))
    with torch.no_grad():
        probe(f[:16], l_[:16])
    print(name, {k: round(v, 4) for k, v in st.items()})
torch.manual_seed(0)

q = vp.QwenTowerProbe(arch_of(c, 64, "qwen2.5-vl", 192), classes)
run("qwen", q, q.tower.blocks, q.tower.patch_embed)
torch.manual_seed(0)
q = vp.QwenTowerProbe(arch_of(c, 64, "qwen2.5-vl", 192), classes)
L.siglip_style_init(q.tower)
run("qwen_xavier", q, q.tower.blocks, q.tower.patch_embed)
torch.manual_seed(0)
s = vp.TowerProbe(arch_of(c, 64, "llava-ov"), classes)
run("siglip", s, s.tower.get_submodule("encoder").layers, s.tower.get_submodule("embeddings"))
torch.manual_seed(0)
base = vp.qwen_vision_config
vp.qwen_vision_config = lambda a: {**base(a), "initializer_range": a.vision_hidden_size ** -0.5}
q = vp.QwenTowerProbe(arch_of(c, 64, "qwen2.5-vl", 192), classes)
run("qwen_irange", q, q.tower.blocks, q.tower.patch_embed)
