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
tree-sd                draft VLM, dynamic tree      strict (lossless)           tree
tree-sparrow           Sparrow draft, dynamic tree  strict (lossless)           tree
=====================  ===========================  ==========================  ====

**Tree methods** (``tree-sd``, ``tree-sparrow``) draft an EAGLE-2 dynamic tree each round and verify
all of it in one target pass (:class:`~vidspec.decoding.fast.TreeSpeculativeDecoder`, see
:mod:`vidspec.decoding.fast.tree`); strict verification keeps the longest path the target itself
would produce, so greedy output is token-identical to AR. Their shape is ``tree=`` (``total_tokens``
nodes per tree, ``depth`` draft levels per round, ``top_k`` children per node and frontier width;
defaults :data:`DEFAULT_TREE`, 48 / 8 / 8, the best CPU setting of benchmarks/sparrow_tree_cpu.py);
``k`` does not apply to them and is ignored (as for ``ar``). They are greedy only: a temperature
above 0 is refused before models load. On the fast engine the target is a FastTarget whose
``max_tree`` must hold the verify tree (``total_tokens + 1`` nodes; raised to fit when this call
wraps the target); the Sparrow tree draft is a :class:`~vidspec.decoding.fast.TreeSparrowDrafter`
(eager) on the eager engine and a :class:`~vidspec.decoding.fast.FastTreeSparrowDrafter` (the same
trees grown on the device, one CUDA graph per round on CUDA) on the fast engine; the draft VLM of
``tree-sd`` always runs through a FastTarget (tree sessions; plain PyTorch on CPU).

For the Sparrow methods ``draft`` is a Sparrow release folder (or a loaded
:class:`~vidspec.decoding.sparrow.SparrowDraftModel` / ``SparrowDrafter``); a release made for
another target is refused unless ``allow_target_mismatch``.

Engines (``engine=``): ``eager`` runs the family adapters as loaded (the reference); ``fast``
wraps the target (and a draft VLM) in :class:`~vidspec.decoding.fast.FastTarget` (static KV
cache, CUDA graphs on CUDA; plain FastLM steps on CPU), verifies strictly with
:class:`~vidspec.decoding.fast.FastStrictVerifier` and drafts with
:class:`~vidspec.decoding.fast.FastModelDrafter`. Loose verifiers are the same classes on either
engine. Greedy output of the strict methods is token-identical on both.

A FastTarget holds one live request: reuse one per loaded adapter for decoders that run one after
another (:func:`as_fast`), never one FastTarget as both target and draft.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vidspec.decoding.drafters import ModelDrafter, NoDrafter
from vidspec.decoding.engine import SpeculativeDecoder
from vidspec.decoding.errors import ConfigError, ModelError
from vidspec.decoding.models import check_compatible, load_target
from vidspec.decoding.models.tiny import TINY_MODELS
from vidspec.decoding.verifiers.strict import StrictVerifier

if TYPE_CHECKING:  # pragma: no cover
    from vidspec.decoding.fast.tree import TreeSpeculativeDecoder

METHODS: tuple[str, ...] = ("ar", "sd", "lvspec", "lvspec-pst", "fly", "sparrow", "sparrow-lvspec-pst",
                            "tree-sd", "tree-sparrow")
#: Methods whose drafter is a Sparrow draft (``--sparrow``).
SPARROW_METHODS = ("sparrow", "sparrow-lvspec-pst", "tree-sparrow")
#: Methods whose drafter is a draft VLM (``--draft``).
DRAFT_VLM_METHODS: tuple[str, ...] = ("sd", "lvspec", "lvspec-pst", "fly", "tree-sd")
#: Methods that draft a dynamic tree per round (:class:`~vidspec.decoding.fast.TreeSpeculativeDecoder`).
TREE_METHODS: tuple[str, ...] = ("tree-sd", "tree-sparrow")
#: Methods whose greedy output must equal the target's own, token for token (strict verification).
LOSSLESS_METHODS: tuple[str, ...] = ("ar", "sd", "sparrow", "tree-sd", "tree-sparrow")
LOOSE_METHODS = ("lvspec", "lvspec-pst", "fly")
#: [choice] Tree shape of the tree methods (``tree=``): the best CPU setting of
#: benchmarks/sparrow_tree_cpu.py (τ 5.74 vs 3.66 for the chain at K = 4, token-identical).
DEFAULT_TREE: dict[str, int] = {"total_tokens": 48, "depth": 8, "top_k": 8}
#: The command-line flag of each ``tree=`` key (named in errors).
TREE_FLAGS: dict[str, str] = {"total_tokens": "--tree-total", "depth": "--tree-depth", "top_k": "--tree-top-k"}
DEFAULT_K = 4
#: ``engine=`` choices (``--engine``).
ENGINES: tuple[str, ...] = ("eager", "fast")
#: FastTarget's default KV cache capacity (prompt + generated tokens + one verify block).
DEFAULT_FAST_MAX_LEN = 8192
#: ``fast_options`` keys, passed to :class:`~vidspec.decoding.fast.FastTarget`.
FAST_OPTIONS = frozenset({"max_len", "graphs", "compile", "prefill_chunk", "fast_vision", "bucket", "max_tree",
                          "fuse", "kernels", "compile_mode", "gemv"})
#: [choice] lvspec-pst lets PST act on the lowest 90% of relevance scores: with the default
#: ``always`` predicate the lowest λ (70%) are accepted anyway, so PST works in the band between
#: and the most visual 10% of positions stay strict (ALGORITHMS.md section 2, PST).
DEFAULT_PST_LAM = 0.9
FLY_OPTIONS = frozenset({"theta", "window", "top"})


def default_draft(target: str) -> str | None:
    """The built-in draft of a built-in tiny target, else None."""
    name = f"{target}-draft"
    return name if name in TINY_MODELS else None


def check_engine(engine: str, fast_options: dict[str, Any] | None = None) -> str:
    """``engine`` if it is known and ``fast_options`` are FastTarget options, else a ConfigError."""
    if engine not in ENGINES:
        raise ConfigError(f"unknown engine {engine!r} (choose from {', '.join(ENGINES)})")
    unknown = sorted(set(fast_options or {}) - FAST_OPTIONS)
    if unknown:
        raise ConfigError(f"unknown fast engine option(s) {', '.join(unknown)} "
                          f"(choose from {', '.join(sorted(FAST_OPTIONS))})")
    return engine


#: ``--fast-gemv`` modes -> FastTarget's ``gemv``: cuBLAS for every weight product ("off"), the Triton
#: GEMV for single-token steps ("decode"), or the Triton small-M/split-K path for steps of up to 16
#: tokens too ("all": verify steps; per shape from the built-in H200 table, RESULTS section 17).
GEMV_MODES: dict[str, bool | str] = {"off": False, "decode": True, "all": "all"}


def check_gemv(mode: str, engine: str, device: str) -> bool | str:
    """FastTarget's ``gemv`` for ``--fast-gemv mode``; a ConfigError naming the problem if it cannot apply."""
    if mode not in GEMV_MODES:
        raise ConfigError(f"unknown --fast-gemv {mode!r} (choose from {', '.join(GEMV_MODES)})")
    if mode != "off" and (engine != "fast" or not str(device).startswith("cuda")):
        raise ConfigError(f"--fast-gemv {mode} needs --engine fast on a CUDA device (Triton kernels), "
                          f"got --engine {engine} --device {device}")
    return GEMV_MODES[mode]


def check_tree(tree: dict[str, Any] | None = None) -> dict[str, int]:
    """The tree shape ``tree`` asks for, over :data:`DEFAULT_TREE`; a ConfigError naming the option if bad."""
    unknown = sorted(set(tree or {}) - set(DEFAULT_TREE))
    if unknown:
        raise ConfigError(f"unknown tree option(s) {', '.join(unknown)} (choose from {', '.join(DEFAULT_TREE)})")
    shape = {**DEFAULT_TREE, **{k: v for k, v in (tree or {}).items() if v is not None}}
    for key, value in shape.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{TREE_FLAGS[key]} ({key}) must be an integer >= 1, got {value!r}")
    return shape


def tree_fast_options(fast_options: dict[str, Any] | None, total_tokens: int) -> dict[str, Any]:
    """``fast_options`` with ``max_tree`` raised to hold a verify tree of ``total_tokens + 1`` nodes.

    A ``max_tree`` given in ``fast_options`` is kept as it is (too small is refused by
    :func:`build_decoder`).
    """
    from vidspec.decoding.fast.target import DEFAULT_MAX_TREE

    opts = dict(fast_options or {})
    if "max_tree" not in opts and total_tokens + 1 > DEFAULT_MAX_TREE:
        opts["max_tree"] = total_tokens + 1
    return opts


def is_fast(model) -> bool:
    """Whether ``model`` is a :class:`~vidspec.decoding.fast.FastTarget` (without importing the fast path)."""
    mod = sys.modules.get("vidspec.decoding.fast.target")
    return mod is not None and isinstance(model, mod.FastTarget)


def as_fast(model, fast_options: dict[str, Any] | None = None):
    """``model`` as a :class:`~vidspec.decoding.fast.FastTarget` (a FastTarget is returned as is).

    Each call on an eager adapter allocates a new static KV cache (and, on CUDA, new graphs):
    wrap a loaded adapter once and pass the wrapper to every decoder that runs on it.
    """
    if is_fast(model):
        return model
    from vidspec.decoding.fast import FastTarget

    opts = {"max_len": DEFAULT_FAST_MAX_LEN, **(fast_options or {})}
    return FastTarget(model, **opts)


def _strict_verifier(engine: str) -> StrictVerifier:
    if engine == "fast":
        from vidspec.decoding.fast import FastStrictVerifier

        return FastStrictVerifier()
    return StrictVerifier()


def sparrow_drafter_class(engine: str) -> type:
    """The Sparrow drafter class of ``engine`` (constructor and ``from_pretrained`` as SparrowDrafter's).

    The eager engine uses :class:`~vidspec.decoding.sparrow.SparrowDrafter`; the fast engine its
    static-cache, CUDA-graph subclass :class:`~vidspec.decoding.fast.sparrow.FastSparrowDrafter`
    (identical proposals; on CPU it runs without graphs).
    """
    check_engine(engine)
    if engine == "fast":
        from vidspec.decoding.fast.sparrow import FastSparrowDrafter

        return FastSparrowDrafter
    from vidspec.decoding.sparrow import SparrowDrafter

    return SparrowDrafter


def build_verifier_for(method: str, target, loose: dict[str, Any] | None, engine: str = "eager"):
    """The verifier of ``method`` for ``target`` (loose options ignored by strict methods)."""
    if method in LOSSLESS_METHODS:
        return _strict_verifier(engine)
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
    engine: str = "eager",
    fast_options: dict[str, Any] | None = None,
    draft_vocab: int | None = None,
    tree: dict[str, Any] | None = None,
    device_rounds: bool = True,
) -> SpeculativeDecoder | TreeSpeculativeDecoder:
    """Load models (or take loaded adapters) and assemble the decoder for ``method``.

    Args:
        temperature: the drafter's default sampling temperature. ``SpeculativeDecoder.generate``
            and ``stream`` replace it (and top-p) with the request's for the call, so it matters
            only to code that drives the drafter itself; ``fly`` refuses a temperature above 0.
        engine: ``eager`` (the adapters as loaded) or ``fast`` (FastTarget wrappers; see the module
            docstring). A FastTarget passed as ``target``/``draft`` is used as is on both engines.
        fast_options: :class:`~vidspec.decoding.fast.FastTarget` keyword arguments for the wrappers
            this call makes (``max_len`` defaults to :data:`DEFAULT_FAST_MAX_LEN`).
        draft_vocab: Sparrow methods: draft only the release's ``draft_vocab`` most frequent tokens
            (its ``draft_vocab.json``; a reduced head, see ``SparrowDrafter(head_ids=...)``).
        tree: tree methods: ``{"total_tokens", "depth", "top_k"}`` (missing keys from
            :data:`DEFAULT_TREE`); ignored by chain methods, as ``k`` is by tree methods.
        device_rounds: greedy rounds whose drafter and target can keep the draft on the device
            (fast engine on CUDA) launch draft and verify back to back with one host synchronisation
            (``SpeculativeDecoder(device_rounds=...)``); False keeps the host-driven rounds (A/B runs).

    Returns:
        A :class:`SpeculativeDecoder`, or for the tree methods a
        :class:`~vidspec.decoding.fast.TreeSpeculativeDecoder` (same ``generate``/``stream`` calls).

    Raises:
        ConfigError: unknown method or engine, missing draft, bad K or tree shape, a temperature
            above 0 for a greedy-only method (fly, the tree methods), a FastTarget given as both
            target and draft or whose ``max_tree`` cannot hold the tree.
        ModelError: models that cannot be loaded or do not fit together.
    """
    if method not in METHODS:
        raise ConfigError(f"unknown method {method!r} (choose from {', '.join(METHODS)})")
    check_engine(engine, fast_options)
    if method == "fly" and temperature > 0:
        # Checked here, before models load, not at the first round (FLyVerifier is greedy only).
        raise ConfigError("method fly is implemented for greedy decoding only; use temperature 0")
    shape = None
    if method in TREE_METHODS:
        if temperature > 0:
            raise ConfigError(f"method {method} is implemented for greedy decoding only; use temperature 0")
        shape = check_tree(tree)
        fast_options = tree_fast_options(fast_options, shape["total_tokens"])
        if method == "tree-sparrow" and draft is None:
            raise ConfigError(f"method {method} needs a Sparrow draft release (--sparrow DIR)")
    tgt = target if not isinstance(target, str) else load_target(
        target, device=device, dtype=dtype, max_frames=max_frames, relevance_layer=relevance_layer)
    if engine == "fast":
        tgt = as_fast(tgt, fast_options)
    if method == "ar":
        return SpeculativeDecoder(tgt, NoDrafter(), _strict_verifier(engine), k=0, method="ar")
    if shape is not None:
        return _tree_decoder(method, tgt, draft, shape, device, dtype, max_frames, allow_target_mismatch, engine,
                             fast_options, draft_vocab, device_rounds)
    verifier = build_verifier_for(method, tgt, loose, engine)
    if k is None:
        k = getattr(verifier, "default_k", DEFAULT_K)
    if k < 1:
        raise ConfigError(f"--k must be >= 1 for method {method}, got {k}")
    if method in SPARROW_METHODS:
        return _sparrow_decoder(method, tgt, draft, verifier, k, temperature, allow_target_mismatch, engine,
                                draft_vocab, device_rounds, _sparrow_options(engine, fast_options))
    dm = _draft_vlm(method, tgt, draft, device, dtype, max_frames, draft_vocab)
    if engine == "fast":
        from vidspec.decoding.fast import FastModelDrafter

        # A module used as target and draft gets a second FastTarget (as_fast always wraps an adapter).
        drafter: ModelDrafter = FastModelDrafter(as_fast(dm, fast_options), temperature=temperature)
    else:
        drafter = ModelDrafter(dm, temperature=temperature)
    return SpeculativeDecoder(tgt, drafter, verifier, k=k, method=method, device_rounds=device_rounds)


def _draft_vlm(method: str, tgt, draft, device: str, dtype: str | None, max_frames: int | None,
               draft_vocab: int | None):
    """The draft VLM of a drafting method: ``draft`` (a name or a loaded model) or the target's built-in draft."""
    if draft_vocab:
        raise ConfigError(f"--draft-vocab applies to the Sparrow methods, not to {method}")
    if draft is None:
        draft = default_draft(tgt.name)
        if draft is None:
            raise ConfigError(f"method {method} needs --draft (a smaller model of the same family as {tgt.name})")
    dm = draft if not isinstance(draft, str) else load_target(draft, device=device, dtype=dtype, max_frames=max_frames)
    if dm.family != tgt.family:
        raise ModelError(f"draft {dm.name!r} is a {dm.family} model but target {tgt.name!r} is {tgt.family}")
    check_compatible(tgt, dm)
    if dm is tgt and is_fast(tgt):
        # One FastTarget holds one live request: the drafter's prefill would overwrite the target's cache.
        raise ConfigError(f"the target and the draft are one FastTarget ({tgt.name!r}); give the draft its own")
    return dm


def _tree_decoder(method: str, tgt, draft, shape: dict[str, int], device: str, dtype: str | None,
                  max_frames: int | None, allow_target_mismatch: bool, engine: str,
                  fast_options: dict[str, Any], draft_vocab: int | None,
                  device_rounds: bool = True) -> TreeSpeculativeDecoder:
    """Decoder of a tree method: strict verification of an EAGLE-2 tree grown by a draft VLM or a Sparrow draft."""
    from vidspec.decoding.fast.tree import TreeModelDrafter, TreeSpeculativeDecoder

    nodes = shape["total_tokens"] + 1  # the verify tree: x_last and the kept draft nodes
    if is_fast(tgt) and tgt.lm.max_tree < nodes:
        raise ConfigError(f"the fast engine's max_tree ({tgt.lm.max_tree}) cannot hold a verify tree of "
                          f"{nodes} nodes (--tree-total {shape['total_tokens']} + 1): raise fast option max_tree "
                          f"to >= {nodes} or lower --tree-total")
    if method == "tree-sparrow":
        drafter = _tree_sparrow_drafter(tgt, draft, allow_target_mismatch, draft_vocab, engine,
                                        _sparrow_options(engine, fast_options))
    else:
        dm = _draft_vlm(method, tgt, draft, device, dtype, max_frames, draft_vocab)
        # The draft grows its tree in FastTarget tree sessions on either engine (TreeModelDrafter wraps
        # an eager adapter itself); on the fast engine it gets this call's options.
        drafter = TreeModelDrafter(as_fast(dm, fast_options) if engine == "fast" else dm)
    # StrictVerifier on both engines: it decides along the best path's rows, which are plain tensors.
    return TreeSpeculativeDecoder(tgt, drafter, StrictVerifier(), total_tokens=shape["total_tokens"],
                                  depth=shape["depth"], top_k=shape["top_k"], method=method,
                                  device_rounds=device_rounds)


def _sparrow_options(engine: str, fast_options: dict[str, Any] | None) -> dict[str, Any]:
    """The fast Sparrow drafters' share of ``fast_options``: ``compile`` (given: the target's choice holds for
    the draft too, so ``compile=False`` leaves nothing of the run to ``torch.compile``)."""
    if engine != "fast" or "compile" not in (fast_options or {}):
        return {}
    return {"compile": fast_options["compile"]}  # type: ignore[index]


def _tree_sparrow_drafter(tgt, draft, allow_target_mismatch: bool, draft_vocab: int | None, engine: str = "eager",
                          options: dict[str, Any] | None = None):
    """A TreeSparrowDrafter from a release folder, a Sparrow draft model or a TreeSparrowDrafter (as is).

    On the fast engine a release or a model becomes a :class:`~vidspec.decoding.fast.FastTreeSparrowDrafter`
    (with ``options``, its engine options).
    """
    from vidspec.decoding.fast.tree_sparrow import TreeSparrowDrafter
    from vidspec.decoding.fast.tree_sparrow_fast import FastTreeSparrowDrafter
    from vidspec.decoding.sparrow import SparrowDraftModel, load_draft_vocab

    cls = FastTreeSparrowDrafter if engine == "fast" else TreeSparrowDrafter

    if isinstance(draft, TreeSparrowDrafter):
        if draft_vocab:
            raise ConfigError("draft_vocab applies when the Sparrow draft is a release or a model, not a drafter")
        return draft
    if isinstance(draft, SparrowDraftModel):
        head_ids = load_draft_vocab(draft, draft_vocab) if draft_vocab else None
        return cls(draft, allow_target_mismatch=allow_target_mismatch, head_ids=head_ids, **(options or {}))
    if not isinstance(draft, (str, Path)):
        raise ConfigError(f"method tree-sparrow needs a Sparrow release folder, a SparrowDraftModel or a "
                          f"TreeSparrowDrafter, not a {type(draft).__name__}")
    return cls.from_pretrained(str(draft), tgt, allow_target_mismatch=allow_target_mismatch, draft_vocab=draft_vocab,
                               **(options or {}))


def _sparrow_decoder(method: str, tgt, draft, verifier, k: int, temperature: float,
                     allow_target_mismatch: bool, engine: str = "eager",
                     draft_vocab: int | None = None, device_rounds: bool = True,
                     options: dict[str, Any] | None = None) -> SpeculativeDecoder:
    """Decoder of a Sparrow method: ``draft`` is a release folder, a draft model or a drafter (used as is);
    ``options``: the engine options of a drafter built here."""
    from vidspec.decoding.sparrow import SparrowDrafter, SparrowDraftModel, load_draft_vocab

    cls = sparrow_drafter_class(engine)
    if draft is None:
        raise ConfigError(f"method {method} needs a Sparrow draft release (--sparrow DIR)")
    if isinstance(draft, (SparrowDrafter, cls)):
        if draft_vocab:
            raise ConfigError("draft_vocab applies when the Sparrow draft is a release or a model, not a drafter")
        drafter = draft
    elif isinstance(draft, SparrowDraftModel):
        head_ids = load_draft_vocab(draft, draft_vocab) if draft_vocab else None
        drafter = cls(draft, temperature=temperature, allow_target_mismatch=allow_target_mismatch, head_ids=head_ids,
                      **(options or {}))
    else:
        drafter = cls.from_pretrained(str(draft), tgt, temperature=temperature,
                                      allow_target_mismatch=allow_target_mismatch, draft_vocab=draft_vocab,
                                      **(options or {}))
    return SpeculativeDecoder(tgt, drafter, verifier, k=k, method=method, device_rounds=device_rounds)
