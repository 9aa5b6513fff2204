"""The shared adapter around a Hugging Face Video-LLM.

:class:`HFVideoTarget` implements the :class:`~vidspec.decoding.types.TargetModel` protocol for any
``*ForConditionalGeneration`` class whose inner model exposes ``get_video_features`` and a
``language_model`` (Qwen2.5-VL, LLaVA-OneVision). A family subclass supplies only what differs:
the chat prompt, the pixel tensors, and the position ids of text tokens.

The adapter calls the vision tower once at prefill, scatters the video features into the
prompt's embeddings itself, and runs the language model with an explicit cache and explicit
position ids. It therefore keeps no state on the HF module (no ``rope_deltas`` on the model), so
one module can serve as target and draft at the same time.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from vidspec.decoding.errors import ConfigError
from vidspec.decoding.prompts import check_user_text
from vidspec.decoding.types import Request, TargetState, VerifyOutput, VideoClip

log = logging.getLogger(__name__)

#: ``need`` names of the attention mass on visual positions (``VerifyOutput.attn_to_visual``),
#: averaged or maxed over heads (the same strings as ``verifiers.relevance.NEED_ATTN*``).
NEED_ATTN_MEAN = "attn_to_visual"
NEED_ATTN_MAX = "attn_to_visual_max"
_NEED_ATTN = frozenset({NEED_ATTN_MEAN, NEED_ATTN_MAX})

DEFAULT_SYSTEM = "You are a helpful assistant."


def crop_cache(cache: Any, length: int) -> None:
    """Crop an HF cache to its first ``length`` positions.

    transformers 5.x changed ``Cache.crop`` from "keep this many" to "remove this many (negative)";
    this works with both.
    """
    current = cache.get_seq_length()
    if length >= current:
        return
    try:
        cache.crop(length - current)  # newer API: a negative count to remove
    except ValueError:
        cache.crop(length)  # older API: the length to keep


#: Environment switch: ``VIDSPEC_SDPA_CUDNN=1`` lets SDPA use cuDNN's attention in the eager steps and
#: prefills too (the default leaves it out; see :func:`sdpa_backends`).
SDPA_CUDNN_ENV = "VIDSPEC_SDPA_CUDNN"


@contextmanager
def sdpa_backends(device: torch.device):
    """While active on a CUDA device, SDPA picks among the flash, memory-efficient and math kernels only.

    cuDNN's fused attention, which recent torch builds may prefer on Hopper, builds an execution plan
    for every new query/key shape (tens to hundreds of milliseconds of host time each). Eager decoding
    meets a new key length at every token and every prompt has a length of its own, so each step or
    prefill could pay a plan build; the flash and memory-efficient kernels need none. Off CUDA, or with
    ``VIDSPEC_SDPA_CUDNN=1``, nothing changes.
    """
    if device.type != "cuda" or os.environ.get(SDPA_CUDNN_ENV) == "1":
        yield
        return
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # pragma: no cover - old torch
        yield
        return
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        yield


@functools.cache
def _cache_kwarg_of(cls: type) -> str:
    import inspect

    params = inspect.signature(cls.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _cache_kwarg(module: torch.nn.Module) -> str:
    """The name under which this transformers version takes the KV cache.

    transformers renamed ``past_key_values`` to ``cache`` during 5.x (the GPU machine has 5.17,
    CPU installs 5.24); asking the signature keeps one code path for both.
    """
    return _cache_kwarg_of(type(module))


def _rotate_query(attn: torch.nn.Module, q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Apply the attention module's own rotary embedding (from its modeling file) to ``q``.

    transformers 5.24 folds Qwen2.5-VL's M-RoPE sections into the rotary embedding's cos/sin and
    applies them with the plain ``apply_rotary_pos_emb``; earlier 5.x releases kept
    ``apply_multimodal_rotary_pos_emb(q, k, cos, sin, mrope_section)``. Both are handled.
    """
    mod = sys.modules[type(attn).__module__]
    multimodal = getattr(mod, "apply_multimodal_rotary_pos_emb", None)
    if multimodal is not None:
        params = getattr(attn.config, "rope_parameters", None) or getattr(attn, "rope_scaling", None) or {}
        q_rot, _ = multimodal(q, q, cos, sin, params["mrope_section"])
        return q_rot
    q_rot, _ = mod.apply_rotary_pos_emb(q, q, cos, sin)
    return q_rot


def attention_to_visual(attn: torch.nn.Module, hidden: torch.Tensor,
                        position_embeddings: tuple[torch.Tensor, torch.Tensor], keys: torch.Tensor,
                        visible: torch.Tensor, visual_positions: torch.Tensor, heads: str = "mean") -> torch.Tensor:
    """Attention probability mass each query row puts on the visual key positions, at one layer.

    Recomputes the layer's queries from its (normed) input and attends to the keys that the
    layer has just written to the KV cache, exactly as HF's eager attention does
    (``softmax(q k^T * scaling + mask)``), in float32, without materialising the GQA repeat.

    Args:
        attn: the decoder layer's self-attention module (``q_proj``, ``head_dim``, ``scaling``).
        hidden: ``(1, n, d)`` the attention module's input hidden states.
        position_embeddings: the ``(cos, sin)`` the module received.
        keys: ``(1, H_kv, T, D)`` the layer's cached keys (post-RoPE), the n new ones included.
        visible: ``(n, T) bool`` which keys each row may attend to.
        visual_positions: ``(L_vis,) int64`` cache positions of the visual tokens.
        heads: "mean" or "max" over the attention heads.

    Returns:
        ``(n,) float32`` in [0, 1].
    """
    n = hidden.shape[1]
    head_dim = attn.head_dim
    q = attn.q_proj(hidden).view(1, n, -1, head_dim)
    if hasattr(attn, "q_norm"):  # families with a per-head query norm (Qwen3 style)
        q = attn.q_norm(q)
    q = q.transpose(1, 2)
    cos, sin = position_embeddings
    q = _rotate_query(attn, q, cos, sin)  # (1, H, n, D)
    h, h_kv, t = q.shape[1], keys.shape[1], keys.shape[2]
    groups = h // h_kv  # HF's repeat_kv: query head i reads kv head i // groups
    qg = q[0].float().reshape(h_kv, groups * n, head_dim)
    scores = (qg @ keys[0].float().transpose(-1, -2)).reshape(h, n, t) * attn.scaling
    window = getattr(attn, "sliding_window", None)
    if window:
        q_pos = torch.arange(t - n, t, device=visible.device)[:, None]
        visible = visible & (q_pos - torch.arange(t, device=visible.device)[None] < window)
    scores = scores.masked_fill(~visible[None], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    mass = probs[:, :, visual_positions.to(probs.device)].sum(-1)  # (H, n)
    return (mass.amax(0) if heads == "max" else mass.mean(0)).clamp_(0.0, 1.0)


@dataclass
class VisualInputs:
    """What a family's preprocessing makes from a clip.

    Attributes:
        num_tokens: visual placeholder tokens in the prompt.
        tensors: keyword tensors for ``get_video_features``.
        extra: family data needed later (Qwen2.5-VL: ``video_grid_thw``, ``second_per_grid_ts``).
    """

    num_tokens: int
    tensors: dict[str, torch.Tensor]
    extra: dict[str, Any]


class HFVideoTarget:
    """A Hugging Face Video-LLM as a vidspec target (and as the model inside a ``ModelDrafter``).

    Args:
        model: the ``*ForConditionalGeneration`` module.
        tokenizer: its tokenizer (a ``PreTrainedTokenizerFast``).
        name: where it came from (hub id, directory or built-in name).
        relevance_layer: hidden-state index used for visual relevance (``None``: the middle
            layer, ``num_layers // 2``). Index 0 is the embeddings, i the output of layer i.
            The attention-mass outputs use the attention of the layer that outputs hidden state
            ``relevance_layer`` (decoder layer ``relevance_layer - 1``); index 0 has no attention and
            uses the first layer.
        max_frames: frames sampled from a video file by :meth:`read_video`.
    """

    family: str = "base"
    video_token: str = ""
    #: The ``need`` names :meth:`verify` honours. ``attn_to_visual`` / ``attn_to_visual_max``: the
    #: attention mass on visual positions (mean / max over heads) of :attr:`attention_layer`.
    provides: frozenset[str] = frozenset({"last", "penult", "mid", NEED_ATTN_MEAN, NEED_ATTN_MAX})

    def __init__(self, model, tokenizer, name: str, relevance_layer: int | None = None, max_frames: int = 8):
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.max_frames = max_frames
        text_cfg = model.config.get_text_config()
        self.num_layers: int = text_cfg.num_hidden_layers
        self.hidden_size: int = text_cfg.hidden_size
        self.vocab_size: int = model.lm_head.out_features
        self.relevance_layer = self.num_layers // 2 if relevance_layer is None else relevance_layer
        if not 0 <= self.relevance_layer <= self.num_layers:
            raise ConfigError(f"relevance_layer {self.relevance_layer} outside 0..{self.num_layers} ({name})")
        eos = {tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.eos_token_id}
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        if gen_eos is not None:
            eos |= set(gen_eos if isinstance(gen_eos, list) else [gen_eos])
        unk = tokenizer.unk_token_id
        self.eos_token_ids = frozenset(int(e) for e in eos if e is not None and e != unk)
        self.video_token_id: int = tokenizer.convert_tokens_to_ids(self.video_token)

    @property
    def attention_layer(self) -> int:
        """0-based decoder layer whose attention the ``attn_to_visual`` outputs read.

        The layer that outputs hidden state ``relevance_layer`` (``relevance_layer - 1``; the
        first layer for ``relevance_layer`` 0).
        """
        return max(self.relevance_layer, 1) - 1

    @contextmanager
    def _capture_attention_input(self, need: frozenset[str]):
        """While active, record the attention module's input of :attr:`attention_layer`.

        Yields a dict that gets ``hidden`` and ``position_embeddings`` during the forward pass
        (empty when ``need`` asks for no attention output: then no hook is installed).
        """
        captured: dict[str, Any] = {}
        if not need & _NEED_ATTN:
            yield captured
            return
        if NEED_ATTN_MEAN in need and NEED_ATTN_MAX in need:
            raise ValueError(f"need both {NEED_ATTN_MEAN!r} and {NEED_ATTN_MAX!r}: one attn_to_visual field")
        attn = self.model.model.language_model.layers[self.attention_layer].self_attn

        def hook(module, args, kwargs):
            captured["hidden"] = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
            pe = kwargs.get("position_embeddings")
            if pe is None and len(args) > 1:
                pe = args[1]
            captured["position_embeddings"] = pe

        handle = attn.register_forward_pre_hook(hook, with_kwargs=True)
        try:
            yield captured
        finally:
            handle.remove()

    def _attention_output(self, state: TargetState, captured: dict[str, Any], need: frozenset[str],
                          new_visible: torch.Tensor | None = None) -> torch.Tensor | None:
        """``VerifyOutput.attn_to_visual`` of the pass just run (None when not asked for).

        Args:
            new_visible: ``(n, n) bool`` which new keys each new row sees (None: causal).
        """
        if not need & _NEED_ATTN:
            return None
        layer = self.attention_layer
        attn = self.model.model.language_model.layers[layer].self_attn
        hidden = captured["hidden"]
        n = hidden.shape[1]
        keys = state.cache.layers[layer].keys
        t = keys.shape[-2]
        if t != state.length:  # e.g. a sliding-window cache layer that dropped old (visual) keys
            raise RuntimeError(f"{self.family}: layer {layer} caches {t} keys for {state.length} positions; "
                               "the attention mass on visual positions needs them all")
        dev = keys.device
        if new_visible is None:
            new_visible = torch.ones(n, n, dtype=torch.bool, device=dev).tril()
        visible = torch.cat([torch.ones(n, t - n, dtype=torch.bool, device=dev), new_visible.to(dev)], dim=1)
        vis = state.visual_positions if state.visual_positions is not None else torch.zeros(0, dtype=torch.long)
        heads = "max" if NEED_ATTN_MAX in need else "mean"
        return attention_to_visual(attn, hidden, captured["position_embeddings"], keys, visible, vis, heads)

    # ---- family hooks -------------------------------------------------------------------------
    def prompt_parts(self, request: Request) -> tuple[str, str]:
        """Chat text before and after the video placeholders."""
        raise NotImplementedError

    def visual_inputs(self, clip: VideoClip) -> VisualInputs:
        """Pixel tensors and token count for a clip."""
        raise NotImplementedError

    def repeated_visual_inputs(self, clip: VideoClip, factor: int) -> VisualInputs:
        """:meth:`visual_inputs` of ``clip.repeat_frames(factor)`` (training's length augmentation). A family
        whose frames are processed one by one overrides it to process each frame once and repeat the tensors."""
        return self.visual_inputs(clip.repeat_frames(factor))

    def prefill_positions(self, input_ids: torch.Tensor, visual: VisualInputs | None) -> tuple[torch.Tensor, Any]:
        """Position ids for the prompt and the family's offset for later text positions."""
        raise NotImplementedError

    def step_positions(self, state: TargetState, n: int) -> torch.Tensor:
        """Position ids for ``n`` new text tokens after ``state.length`` cached positions."""
        raise NotImplementedError

    def video_features(self, visual: VisualInputs) -> torch.Tensor:
        """``(L_vis, d)`` language-model inputs for the visual placeholders."""
        with sdpa_backends(self.device):
            out = self.model.model.get_video_features(**visual.tensors, return_dict=True)
        feats = out.pooler_output
        if isinstance(feats, (list, tuple)):
            feats = torch.cat(list(feats), dim=0)
        return feats.reshape(-1, feats.shape[-1])

    def read_video(self, path: str) -> VideoClip:
        """Read a video file with this family's frame budget."""
        from vidspec.decoding.video import read_video

        return read_video(path, max_frames=self.max_frames, max_pixels=self.max_read_pixels)

    max_read_pixels: int | None = None

    # ---- the TargetModel protocol --------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.model.lm_head.weight.device

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The language model's input embeddings of ``input_ids``.

        The embedding module is looked up once (transformers' ``get_input_embeddings`` walks the module
        tree on every call, a measurable share of a small model's decode step on the CPU) and looked up
        again only if the model's embedding module was replaced.
        """
        emb = self.__dict__.get("_embed_module")
        if emb is None or emb is not getattr(self.model.model.language_model, "embed_tokens", emb):
            emb = self.__dict__["_embed_module"] = self.model.get_input_embeddings()
        return emb(input_ids)

    def build_prompt(self, request: Request,
                     visual: VisualInputs | None = None) -> tuple[torch.Tensor, VisualInputs | None]:
        """Token ids of the chat prompt with the video placeholders expanded.

        Args:
            request: the prompt and clip.
            visual: visual inputs to place instead of computing them from ``request.clip`` (its frames repeated:
                :meth:`repeated_visual_inputs`); default: ``request.clip``'s.

        Returns:
            ``(L,) int64`` ids and the clip's visual inputs (None without a video).
        """
        # Control tokens in user text (the video placeholder, <|im_end|>, ...) would be read as markup.
        check_user_text(self.tokenizer, request.prompt, request.system, self.video_token)
        before, after = self.prompt_parts(request)
        if request.clip is None:
            visual = None
        elif visual is None:
            visual = self.visual_inputs(request.clip)
        ids = self.tokenizer(before, add_special_tokens=False)["input_ids"]
        if visual is not None:
            ids = ids + [self.video_token_id] * visual.num_tokens
        ids = ids + self.tokenizer(after, add_special_tokens=False)["input_ids"]
        return torch.tensor(ids, dtype=torch.long), visual

    def generate_inputs(self, ids: torch.Tensor, visual: VisualInputs | None) -> dict[str, Any]:
        """Keyword inputs of transformers' ``self.model.generate`` for a :meth:`build_prompt` prompt."""
        input_ids = ids[None].to(self.device)
        kw: dict[str, Any] = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
        if visual is not None:
            kw.update(visual.tensors)
        return kw

    @torch.inference_mode()
    def hf_generate(self, request: Request, max_new_tokens: int) -> list[int]:
        """transformers' own greedy ``generate`` (its dynamic cache) on this adapter's prompt.

        The reference our AR decoding is tested against (token-identical) and the transformers
        baseline of the end-to-end timings. Returns the new token ids (an EOS, if reached, included).
        """
        ids, visual = self.build_prompt(request)
        out = self.model.generate(**self.generate_inputs(ids, visual), max_new_tokens=max_new_tokens, do_sample=False)
        return out[0, ids.shape[0]:].tolist()

    def _lm(self, embeds: torch.Tensor, positions: torch.Tensor, cache, hidden: bool,
            attention_mask: torch.Tensor | None = None):
        lm = self.model.model.language_model
        with sdpa_backends(embeds.device):
            return lm(
                inputs_embeds=embeds,
                attention_mask=attention_mask,
                position_ids=positions,
                use_cache=True,
                output_hidden_states=hidden,
                return_dict=True,
                **{_cache_kwarg(lm): cache},
            )

    @torch.inference_mode()
    def prefill(self, request: Request, need: frozenset[str] = frozenset()) -> TargetState:
        from transformers import DynamicCache

        ids, visual = self.build_prompt(request)
        dev = self.device
        input_ids = ids[None].to(dev)
        embeds = self.embed(input_ids)
        visual_positions = torch.nonzero(ids == self.video_token_id).flatten()
        if visual is not None:
            feats = self.video_features(visual).to(embeds.dtype)
            if feats.shape[0] != visual.num_tokens:
                raise RuntimeError(f"{self.family}: {feats.shape[0]} video features for {visual.num_tokens} placeholders")
            embeds[0, visual_positions.to(dev)] = feats
        positions, offset = self.prefill_positions(input_ids, visual)
        cache = DynamicCache(config=self.model.config.get_text_config())
        want_hidden = bool(need & {"penult", "mid", "visual"})
        out = self._lm(embeds, positions, cache, want_hidden)
        last = out.last_hidden_state[0, -1:]
        logits = self.model.lm_head(last)[0].float()
        state = TargetState(
            request=request,
            prompt_ids=ids,
            cache=cache,
            length=ids.shape[0],
            first_logits=logits,
            visual_positions=visual_positions,
            relevance_layer=self.relevance_layer,
            extra={"offset": offset, "visual": visual},
        )
        if want_hidden:
            hs = out.hidden_states
            if "penult" in need:
                state.prompt_hidden_penult = hs[-2][0]
            if need & {"mid", "visual"} and visual is not None:
                state.visual_hidden = hs[self.relevance_layer][0, visual_positions.to(dev)]
        return state

    @torch.inference_mode()
    def verify(self, state: TargetState, tokens: list[int], need: frozenset[str] = frozenset()) -> VerifyOutput:
        dev = self.device
        input_ids = torch.tensor([tokens], dtype=torch.long, device=dev)
        embeds = self.embed(input_ids)
        positions = self.step_positions(state, len(tokens))
        want_hidden = bool(need & {"penult", "mid"})
        with self._capture_attention_input(need) as captured:
            out = self._lm(embeds, positions, state.cache, want_hidden)
        state.length += len(tokens)
        h_last = out.last_hidden_state[0]
        logits = self.model.lm_head(h_last).float()
        hs = out.hidden_states if want_hidden else None
        return VerifyOutput(
            logits=logits,
            hidden_last=h_last if "last" in need else None,
            hidden_penult=hs[-2][0] if hs is not None and "penult" in need else None,
            hidden_mid=hs[state.relevance_layer][0] if hs is not None and "mid" in need else None,
            attn_to_visual=self._attention_output(state, captured, need),
        )

    def rollback(self, state: TargetState, length: int) -> None:
        if length > state.length:
            raise ValueError(f"cannot roll forward from {state.length} to {length}")
        crop_cache(state.cache, length)
        state.length = length
        state.extra.pop("tree_base", None)

    # ---- trees (eager reference of vidspec.decoding.fast.FastTarget.verify_tree) ---------------
    @torch.inference_mode()
    def verify_tree(self, state: TargetState, tokens: list[int], parents: list[int],
                    need: frozenset[str] = frozenset()) -> VerifyOutput:
        """Run a token tree after the cache: each node sees the prefix, its ancestors and itself.

        One tree per call (``parents[i]`` is an earlier node of this call, or -1 for a root); a
        node's position is the root position plus its depth. Close with :meth:`commit_tree`.

        Returns:
            Rows in node order, as :meth:`verify`.
        """
        from vidspec.decoding.trees import tree_mask_and_depth

        if "tree_base" in state.extra:
            raise RuntimeError("a tree is already open on this state: commit_tree or rollback first")
        dev = self.device
        anc, depth = tree_mask_and_depth(list(parents))
        n, base = len(tokens), state.length
        input_ids = torch.tensor([tokens], dtype=torch.long, device=dev)
        embeds = self.embed(input_ids)
        visible = torch.cat([torch.ones(n, base, dtype=torch.bool), anc], dim=1).to(dev)
        mask = torch.zeros(visible.shape, dtype=embeds.dtype, device=dev)
        mask = mask.masked_fill(~visible, torch.finfo(embeds.dtype).min)[None, None]
        positions = self.step_positions(state, 1) + torch.tensor(depth, device=dev)
        want_hidden = bool(need & {"penult", "mid"})
        with self._capture_attention_input(need) as captured:
            out = self._lm(embeds, positions, state.cache, want_hidden, attention_mask=mask)
        state.length += n
        state.extra["tree_base"] = base
        h_last = out.last_hidden_state[0]
        hs = out.hidden_states if want_hidden else None
        return VerifyOutput(
            logits=self.model.lm_head(h_last).float(),
            hidden_last=h_last if "last" in need else None,
            hidden_penult=hs[-2][0] if hs is not None and "penult" in need else None,
            hidden_mid=hs[state.relevance_layer][0] if hs is not None and "mid" in need else None,
            attn_to_visual=self._attention_output(state, captured, need, anc.to(dev)),
        )

    @torch.inference_mode()
    def commit_tree(self, state: TargetState, path: list[int]) -> None:
        """Keep the tree nodes ``path`` (root to leaf) after the prefix and drop the other nodes."""
        base = state.extra.pop("tree_base")
        keep = torch.cat([torch.arange(base), base + torch.tensor(path, dtype=torch.long)]).to(self.device)
        for layer in state.cache.layers:
            layer.keys = layer.keys.index_select(-2, keep)
            layer.values = layer.values.index_select(-2, keep)
        state.length = base + len(path)

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)

    def __repr__(self) -> str:
        n = sum(p.numel() for p in self.model.parameters())
        return f"{type(self).__name__}({self.name!r}, layers={self.num_layers}, params={n / 1e6:.2f}M)"
