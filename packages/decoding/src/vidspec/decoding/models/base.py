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
from dataclasses import dataclass
from typing import Any

import torch

from vidspec.decoding.errors import ConfigError
from vidspec.decoding.types import Request, TargetState, VerifyOutput, VideoClip

log = logging.getLogger(__name__)

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
        max_frames: frames sampled from a video file by :meth:`read_video`.
    """

    family: str = "base"
    video_token: str = ""
    #: The ``need`` names :meth:`verify` honours (no ``attn_to_visual``: attention is not computed).
    provides: frozenset[str] = frozenset({"last", "penult", "mid"})

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

    # ---- family hooks -------------------------------------------------------------------------
    def prompt_parts(self, request: Request) -> tuple[str, str]:
        """Chat text before and after the video placeholders."""
        raise NotImplementedError

    def visual_inputs(self, clip: VideoClip) -> VisualInputs:
        """Pixel tensors and token count for a clip."""
        raise NotImplementedError

    def prefill_positions(self, input_ids: torch.Tensor, visual: VisualInputs | None) -> tuple[torch.Tensor, Any]:
        """Position ids for the prompt and the family's offset for later text positions."""
        raise NotImplementedError

    def step_positions(self, state: TargetState, n: int) -> torch.Tensor:
        """Position ids for ``n`` new text tokens after ``state.length`` cached positions."""
        raise NotImplementedError

    def video_features(self, visual: VisualInputs) -> torch.Tensor:
        """``(L_vis, d)`` language-model inputs for the visual placeholders."""
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

    def build_prompt(self, request: Request) -> tuple[torch.Tensor, VisualInputs | None]:
        """Token ids of the chat prompt with the video placeholders expanded.

        Returns:
            ``(L,) int64`` ids and the clip's visual inputs (None without a video).
        """
        if self.video_token and self.video_token in request.prompt + (request.system or ""):
            # The placeholder would tokenize to the video token id: the features would be scattered
            # into the wrong positions (or the counts would not match) at prefill.
            raise ConfigError(f"the prompt must not contain the video placeholder {self.video_token!r}")
        before, after = self.prompt_parts(request)
        visual = self.visual_inputs(request.clip) if request.clip is not None else None
        ids = self.tokenizer(before, add_special_tokens=False)["input_ids"]
        if visual is not None:
            ids = ids + [self.video_token_id] * visual.num_tokens
        ids = ids + self.tokenizer(after, add_special_tokens=False)["input_ids"]
        return torch.tensor(ids, dtype=torch.long), visual

    def _lm(self, embeds: torch.Tensor, positions: torch.Tensor, cache, hidden: bool,
            attention_mask: torch.Tensor | None = None):
        lm = self.model.model.language_model
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
        embeds = self.model.get_input_embeddings()(input_ids)
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
        embeds = self.model.get_input_embeddings()(input_ids)
        positions = self.step_positions(state, len(tokens))
        want_hidden = bool(need & {"penult", "mid"})
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
        from vidspec.decoding.fast.tree import tree_mask_and_depth

        if "tree_base" in state.extra:
            raise RuntimeError("a tree is already open on this state: commit_tree or rollback first")
        dev = self.device
        anc, depth = tree_mask_and_depth(list(parents))
        n, base = len(tokens), state.length
        input_ids = torch.tensor([tokens], dtype=torch.long, device=dev)
        embeds = self.model.get_input_embeddings()(input_ids)
        visible = torch.cat([torch.ones(n, base, dtype=torch.bool), anc], dim=1).to(dev)
        mask = torch.zeros(visible.shape, dtype=embeds.dtype, device=dev)
        mask = mask.masked_fill(~visible, torch.finfo(embeds.dtype).min)[None, None]
        positions = self.step_positions(state, 1) + torch.tensor(depth, device=dev)
        want_hidden = bool(need & {"penult", "mid"})
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
