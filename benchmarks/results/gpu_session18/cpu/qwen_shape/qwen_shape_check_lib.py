import torch.nn as nn
from torch.nn import init


def siglip_style_init(tower: nn.Module, what=("attn", "mlp", "patch", "merger")) -> None:
    """SigLIP's init (transformers SiglipPreTrainedModel._init_weights) applied to a Qwen2.5-VL tower's own modules."""
    for name, m in tower.named_modules():
        if isinstance(m, nn.Linear):
            part = "attn" if ".attn." in name else "mlp" if ".mlp." in name and name.startswith("blocks") else "merger"
            if part not in what:
                continue
            if part == "merger":
                init.lecun_normal_(m.weight) if hasattr(init, "lecun_normal_") else nn.init.trunc_normal_(m.weight, std=m.in_features ** -0.5)
            else:
                nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Conv3d) and "patch" in what:
            fan_in = m.weight[0].numel()
            nn.init.trunc_normal_(m.weight, std=fan_in ** -0.5)  # lecun normal


