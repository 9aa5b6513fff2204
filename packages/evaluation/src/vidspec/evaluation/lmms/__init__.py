"""vidspec as an lmms-eval model: ``lmms-eval --model vidspec --model_args target=...,method=sparrow,...``.

lmms-eval (pinned in ``constraints/lmms-eval.txt``, installed by ``make install-lmms`` into its own
environment) finds external models through the Python entry-point group ``lmms_eval.models``; this package's
distribution declares ``vidspec = vidspec.evaluation.lmms:manifest`` there. lmms-eval then runs any of its
tasks through :class:`~vidspec.evaluation.lmms.model.VidspecLMM` with its own prompts, answer extraction
and metrics, so the scores are the ones the field publishes, while every decode goes through
:func:`vidspec.decoding.methods.build_decoder` and leaves a vidspec per-sample record (tau, timings and,
with ``compare_ar=true``, token identity against autoregressive decoding).

Nothing here is imported by the rest of vidspec: lmms-eval is not a dependency of ``vidspec eval``.
"""

from __future__ import annotations

#: The name ``--model`` takes.
MODEL_ID = "vidspec"
#: Where lmms-eval imports the model class from.
CLASS_PATH = "vidspec.evaluation.lmms.model.VidspecLMM"


def manifest():
    """The entry point lmms-eval calls: a ModelManifest naming :data:`CLASS_PATH` as a simple model."""
    from lmms_eval.models.registry_v2 import ModelManifest

    return ModelManifest(model_id=MODEL_ID, simple_class_path=CLASS_PATH)
