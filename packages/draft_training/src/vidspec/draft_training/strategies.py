"""Distributed strategies for a draft trained beside a frozen model it reads from.

Sparrow distillation trains a small draft (one decoder layer and a fusion FC) while a frozen
target, which is not a registered submodule, supplies features. Two things that are right for an
ordinary FSDP model are wrong here, and :class:`DraftFSDPStrategy` changes exactly those:

* Lightning's ``bf16-mixed`` FSDP configuration casts every buffer to bf16, the draft's RoPE
  ``inv_freq`` included. In bf16 the rotary angle at position 25,000 is off by tens of radians,
  so the draft would learn other positions than the float32 ones it decodes with. Buffers stay
  float32 here.
* FSDP casts the floating tensors of the root module's forward inputs to the parameter dtype. The
  batch goes to the frozen target, whose inputs (``pixel_values_videos``, ``second_per_grid_ts``)
  must arrive as the data module made them: a bf16 ``second_per_grid_ts`` moves the temporal
  M-RoPE positions of some visual tokens by one. Inputs are not cast here.

Gradients are reduced in float32 (the draft is small, so this costs little). Norm clipping goes
through :meth:`~vidspec.draft_training.sparrow.module.SparrowDistillModule.configure_gradient_clipping`,
which calls FSDP's own ``clip_grad_norm_`` (a norm over all shards) instead of Lightning's precision
plugin, which refuses norm clipping under FSDP.

Under both DDP and this strategy the frozen target is replicated: each process holds one copy on
its own device (about 16 GiB for a 7B target in bf16), and only the draft is wrapped.
"""

from __future__ import annotations

import dataclasses

import torch
from lightning.pytorch.strategies import FSDPStrategy


class DraftFSDPStrategy(FSDPStrategy):
    """:class:`~lightning.pytorch.strategies.FSDPStrategy` keeping buffers and forward inputs in their own dtype.

    Takes the same arguments as Lightning's FSDPStrategy; an explicit ``mixed_precision`` argument
    is used as given.
    """

    @property
    def mixed_precision_config(self):
        if self.mixed_precision:
            return self.mixed_precision
        base = super().mixed_precision_config
        if base is None:
            return None
        return dataclasses.replace(base, reduce_dtype=torch.float32, buffer_dtype=torch.float32,
                                   cast_forward_inputs=False, cast_root_forward_inputs=False)
