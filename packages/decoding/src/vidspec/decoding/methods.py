"""Method names (``--method``) to decoders: which drafter, which verifier, which K.

=====================  ===========================  ==========================  ====
method                 drafter                      verifier                    K
=====================  ===========================  ==========================  ====
ar                     none                         strict                      0
sd                     draft VLM (ModelDrafter)     strict (lossless)           4
lvspec                 draft VLM                    LVSpec                      4
lvspec-pst             draft VLM                    LVSpec + PST                4
fly                    draft VLM                    FLy                         15
sparrow                Sparrow draft (--sparrow)    strict (lossless)           4
sparrow-lvspec-pst     Sparrow draft (--sparrow)    LVSpec + PST                4
=====================  ===========================  ==========================  ====

For the Sparrow methods ``draft`` is a Sparrow release folder (or a loaded
:class:`~vidspec.decoding.sparrow.SparrowDraftModel` / ``SparrowDrafter``); a release made for
another target is refused unless ``allow_target_mismatch``.
"""

from __future__ import annotations

from typing import Any

from vidspec.decoding.drafters import ModelDrafter, NoDrafter
from vidspec.decoding.engine import SpeculativeDecoder
from vidspec.decoding.errors import ConfigError, ModelError
from vidspec.decoding.models import check_compatible, load_target
from vidspec.decoding.models.tiny import TINY_MODELS
from vidspec.decoding.verifiers.strict import StrictVerifier

METHODS: tuple[str, ...] = ("ar", "sd", "lvspec", "lvspec-pst", "fly", "sparrow", "sparrow-lvspec-pst")
SPARROW_METHODS = ("sparrow", "sparrow-lvspec-pst")
#: Methods whose greedy output must equal the target's own, token for token (strict verification).
LOSSLESS_METHODS: tuple[str, ...] = ("ar", "sd", "sparrow")
LOOSE_METHODS = ("lvspec", "lvspec-pst", "fly")
DEFAULT_K = 4
#: [choice] lvspec-pst lets PST act on the lowest 90% of relevance scores: with the default
#: ``always`` predicate the lowest λ (70%) are accepted anyway, so PST works in the band between
#: and the most visual 10% of positions stay strict (ALGORITHMS.md section 2, PST).
DEFAULT_PST_LAM = 0.9
FLY_OPTIONS = frozenset({"theta", "window", "top"})


def default_draft(target: str) -> str | None:
    """The built-in draft of a built-in tiny target, else None."""
    name = f"{target}-draft"
    return name if name in TINY_MODELS else None


def build_verifier_for(method: str, target, loose: dict[str, Any] | None):
    """The verifier of ``method`` for ``target`` (loose options ignored by strict methods)."""
    if method in ("ar", "sd", "sparrow"):
        return StrictVerifier()
    if method == "sparrow-lvspec-pst":
        method = "lvspec-pst"  # the same verifier; only the drafter differs
    from vidspec.decoding.verifiers.registry import build_verifier

    opts = dict(loose or {})
    if method == "fly":
        # FLy is text-only and has its own knobs; the LVSpec flags do not apply to it.
        opts = {k: v for k, v in opts.items() if k in FLY_OPTIONS}
        return build_verifier(method, **opts)
    opts = {k: v for k, v in opts.items() if k not in FLY_OPTIONS}
    if method == "lvspec":
        opts.pop("pst_window", None)
        opts.pop("pst_lam", None)
    elif opts.get("pst_lam") is None:
        lam = 0.7 if opts.get("lam") is None else opts["lam"]
        # λ = 0 means strict verification, PST included; otherwise PST reaches up to the 90% band.
        opts["pst_lam"] = 0.0 if lam == 0 else max(lam, DEFAULT_PST_LAM)
    return build_verifier(method, tokenizer=target.tokenizer, **opts)


def build_decoder(
    method: str,
    *,
    target: str | Any,
    draft: str | Any | None = None,
    k: int | None = None,
    device: str = "cpu",
    dtype: str | None = None,
    max_frames: int | None = None,
    relevance_layer: int | None = None,
    temperature: float = 0.0,
    loose: dict[str, Any] | None = None,
    allow_target_mismatch: bool = False,
) -> SpeculativeDecoder:
    """Load models (or take loaded adapters) and assemble the decoder for ``method``.

    Raises:
        ConfigError: unknown method, missing draft, bad K.
        ModelError: models that cannot be loaded or do not fit together.
    """
    if method not in METHODS:
        raise ConfigError(f"unknown method {method!r} (choose from {', '.join(METHODS)})")
    if method == "fly" and temperature > 0:
        # Checked here, before models load, not at the first round (FLyVerifier is greedy only).
        raise ConfigError("method fly is implemented for greedy decoding only; use temperature 0")
    tgt = target if not isinstance(target, str) else load_target(
        target, device=device, dtype=dtype, max_frames=max_frames, relevance_layer=relevance_layer)
    if method == "ar":
        return SpeculativeDecoder(tgt, NoDrafter(), StrictVerifier(), k=0, method="ar")
    verifier = build_verifier_for(method, tgt, loose)
    if k is None:
        k = getattr(verifier, "default_k", DEFAULT_K)
    if k < 1:
        raise ConfigError(f"--k must be >= 1 for method {method}, got {k}")
    if method in SPARROW_METHODS:
        return _sparrow_decoder(method, tgt, draft, verifier, k, temperature, allow_target_mismatch)
    if draft is None:
        draft = default_draft(tgt.name)
        if draft is None:
            raise ConfigError(f"method {method} needs --draft (a smaller model of the same family as {tgt.name})")
    dm = draft if not isinstance(draft, str) else load_target(draft, device=device, dtype=dtype, max_frames=max_frames)
    if dm.family != tgt.family:
        raise ModelError(f"draft {dm.name!r} is a {dm.family} model but target {tgt.name!r} is {tgt.family}")
    check_compatible(tgt, dm)
    drafter = ModelDrafter(dm, temperature=temperature)
    return SpeculativeDecoder(tgt, drafter, verifier, k=k, method=method)


def _sparrow_decoder(method: str, tgt, draft, verifier, k: int, temperature: float,
                     allow_target_mismatch: bool) -> SpeculativeDecoder:
    """Decoder of a Sparrow method: ``draft`` is a release folder, a draft model or a drafter."""
    from vidspec.decoding.sparrow import SparrowDrafter, SparrowDraftModel

    if draft is None:
        raise ConfigError(f"method {method} needs a Sparrow draft release (--sparrow DIR)")
    if isinstance(draft, SparrowDrafter):
        drafter = draft
    elif isinstance(draft, SparrowDraftModel):
        drafter = SparrowDrafter(draft, temperature=temperature, allow_target_mismatch=allow_target_mismatch)
    else:
        drafter = SparrowDrafter.from_pretrained(str(draft), tgt, temperature=temperature,
                                                 allow_target_mismatch=allow_target_mismatch)
    return SpeculativeDecoder(tgt, drafter, verifier, k=k, method=method)
