"""Sparrow draft distillation (docs/algorithms.md, "Sparrow"): training module, losses, data and features.

- :class:`~.module.SparrowDistillModule`: the LightningModule (``vidspec train fit`` recipes
  ``configs/train/sparrow-*.yaml``); its exporter makes ``vidspec export`` write a Sparrow release.
- :mod:`.losses`: forward KL, ViSpec L1 + ranking, feature regression, the accept-length proxy.
- :mod:`.features`: a precomputed target feature cache; :mod:`.precompute` fills it (``vidspec sparrow-features``).
- :mod:`.distill_data`: self-distilled answers written by the target (``vidspec distill-data``).
"""

from vidspec.draft_training.sparrow.module import (
    SparrowDistillModule,
    SparrowDraftOptions,
    SparrowLossConfig,
    export_sparrow,
)

__all__ = ["SparrowDistillModule", "SparrowDraftOptions", "SparrowLossConfig", "export_sparrow"]
