"""Architectures of the testbed Video-LLMs: a typed size spec turned into a Hugging Face config.

The two families vidspec decodes are built from scratch here at any size, with special-token ids
taken from the tokenizer the model will be trained with (SynthVid's, or any tokenizer carrying
Qwen-style chat and vision tokens)::

    arch = ArchConfig(family="llava-ov", hidden_size=256, num_layers=4)
    config = build_hf_config(arch, tokenizer)
    model = hf_model_class(arch.family)(config)

Sizes are the *real* architectures (``Qwen2_5_VLForConditionalGeneration``,
``LlavaOnevisionForConditionalGeneration``), only smaller, so every code path of decoding runs on
them unchanged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from vidspec.decoding.errors import ConfigError

Family = Literal["llava-ov", "qwen2.5-vl"]

#: Family name (as the decoding adapters spell it) -> transformers class name.
HF_CLASSES: dict[str, str] = {
    "qwen2.5-vl": "Qwen2_5_VLForConditionalGeneration",
    "llava-ov": "LlavaOnevisionForConditionalGeneration",
}

#: config.model_type -> family name.
MODEL_TYPES: dict[str, str] = {"qwen2_5_vl": "qwen2.5-vl", "llava_onevision": "llava-ov"}

#: Tokens the adapters and the chat prompt rely on; the tokenizer must know every one.
REQUIRED_TOKENS = ("<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|video_pad|>", "<video>")


@dataclass(frozen=True)
class ArchConfig:
    """Sizes of a Video-LLM built from scratch.

    Attributes:
        family: "llava-ov" (SigLIP tower encoding whole frames + Qwen2 LM; fast to train) or
            "qwen2.5-vl" (windowed ViT over 2-frame patches + M-RoPE LM).
        hidden_size: width of the language model.
        num_layers: decoder layers of the language model.
        num_heads: attention heads of the language model.
        num_kv_heads: key/value heads (grouped-query attention); must divide ``num_heads``.
        intermediate_size: MLP width of the language model (default 4 x hidden_size).
        vision_hidden_size: width of the vision tower.
        vision_layers: layers of the vision tower.
        vision_heads: attention heads of the vision tower.
        vision_intermediate_size: MLP width of the vision tower (default 2 x vision_hidden_size).
        image_size: LLaVA-OV only: side of the square frames SigLIP reads (a multiple of
            ``patch_size``); each frame becomes ceil(image_size / patch_size / 2)^2 tokens.
        patch_size: vision patch side in pixels (Qwen2.5-VL frames are resized to multiples of
            2 x patch_size).
        window_size: Qwen2.5-VL only: side in pixels of the vision tower's attention windows.
        vision_init_std: Qwen2.5-VL only: the std of the vision tower's initial Linear and Conv3d
            weights (None: transformers' ``initializer_range``, 0.02, a scale for Qwen's 1280-wide
            tower). At 0.02 a narrow tower's blocks start with outputs of 1-6% of its patch
            embedding's; ``vision_hidden_size ** -0.5`` gives them SigLIP-like scales.
        tie_word_embeddings: share the input embedding and the LM head.
        rope_theta: RoPE base of the language model.
        mrope_section: Qwen2.5-VL only: how many of the rotary frequency pairs (half a head) go to the
            temporal, height and width positions of video tokens, in that order; Qwen2.5-VL gives each one
            contiguous band, highest frequencies first (pair j turns by ``rope_theta ** (-2j / head_dim)``
            rad a position). None: thirds ([8, 8, 8] for a head of 48). On a small token grid the thirds
            leave width at most 0.002 rad a token (height 0.05) at base 10000, and a language model does not
            learn where a video's object is (docs/results.md); [2, 2, 20] with ``rope_theta`` 100 gives
            width 0.46 rad and height 0.68. Text tokens see the whole head either way.
        tokens_per_second: Qwen2.5-VL only: temporal positions a second of video advances M-RoPE by; a
            temporal patch moves ``tokens_per_second * second_per_grid_ts`` positions, rounded down as
            transformers does. At SynthVid's 4 fps a patch of two frames moves 2 x 0.5 = 1 position; a patch of
            one frame (the adapter's ``frame_per_patch``) needs 4, or two patches in a row share a position.
        max_position_embeddings: longest sequence the language model is configured for.
    """

    family: Family = "llava-ov"
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int | None = None
    vision_hidden_size: int = 64
    vision_layers: int = 2
    vision_heads: int = 2
    vision_intermediate_size: int | None = None
    image_size: int = 56
    patch_size: int = 14
    window_size: int = 112
    vision_init_std: float | None = None
    tie_word_embeddings: bool = False
    rope_theta: float = 10000.0
    mrope_section: list[int] | None = None
    tokens_per_second: int = 2
    max_position_embeddings: int = 32768

    def __post_init__(self) -> None:
        if self.family not in HF_CLASSES:
            raise ConfigError(f"arch.family must be one of {sorted(HF_CLASSES)}, got {self.family!r}")
        for name in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "vision_hidden_size",
                     "vision_layers", "vision_heads", "image_size", "patch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"arch.{name} must be positive, got {getattr(self, name)}")
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"arch: hidden_size ({self.hidden_size}) must be divisible by num_heads ({self.num_heads}), "
                f"and num_heads by num_kv_heads ({self.num_kv_heads})"
            )
        if self.vision_hidden_size % self.vision_heads:
            raise ConfigError(f"arch: vision_hidden_size {self.vision_hidden_size} not divisible by vision_heads")
        if self.family == "llava-ov" and self.image_size % self.patch_size:
            raise ConfigError(f"arch: image_size {self.image_size} is not a multiple of patch_size {self.patch_size}")
        if self.tokens_per_second < 1 or (self.tokens_per_second != 2 and self.family != "qwen2.5-vl"):
            raise ConfigError(f"arch.tokens_per_second must be positive and applies to qwen2.5-vl only (M-RoPE); got "
                              f"{self.tokens_per_second} for {self.family}")
        if self.vision_init_std is not None and not (self.family == "qwen2.5-vl" and self.vision_init_std > 0):
            raise ConfigError(f"arch.vision_init_std must be positive and applies to qwen2.5-vl only (SigLIP sets "
                              f"its own initialisation); got {self.vision_init_std} for {self.family}")
        if self.family == "qwen2.5-vl" and (self.hidden_size // self.num_heads) % 4:
            # M-RoPE splits half the head dimension into three sections.
            raise ConfigError("arch: qwen2.5-vl needs a head dimension (hidden_size / num_heads) divisible by 4")
        if self.mrope_section is not None:
            half = self.hidden_size // self.num_heads // 2
            if self.family != "qwen2.5-vl":
                raise ConfigError(f"arch.mrope_section applies to qwen2.5-vl only (M-RoPE); got it for {self.family}")
            if (len(self.mrope_section) != 3 or any(int(x) < 1 for x in self.mrope_section)
                    or sum(self.mrope_section) != half):
                raise ConfigError(f"arch.mrope_section must be three positive sizes (temporal, height, width) adding "
                                  f"up to half a head ({half}), got {list(self.mrope_section)}")

    def to_dict(self) -> dict:
        return asdict(self)


def default_mrope_section(head_dim: int) -> list[int]:
    """Thirds of half a head for (temporal, height, width), the temporal band taking the remainder."""
    half = head_dim // 2
    return [half - 2 * (half // 3), half // 3, half // 3]


def _token_ids(tokenizer) -> dict[str, int]:
    ids = {}
    unk = tokenizer.unk_token_id
    for t in (*REQUIRED_TOKENS, "<|image_pad|>", "<image>"):
        i = tokenizer.convert_tokens_to_ids(t)
        if i is None or (unk is not None and i == unk):
            if t in REQUIRED_TOKENS:
                raise ConfigError(f"the tokenizer has no special token {t!r} (needed by the chat prompt)")
            i = None
        ids[t] = i
    return ids


def build_hf_config(arch: ArchConfig, tokenizer):
    """A transformers config of ``arch``'s family whose token ids match ``tokenizer``.

    Raises:
        ConfigError: the tokenizer lacks a chat or vision token.
    """
    ids = _token_ids(tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    inter = arch.intermediate_size or 4 * arch.hidden_size
    text = dict(
        vocab_size=len(tokenizer),
        hidden_size=arch.hidden_size,
        intermediate_size=inter,
        num_hidden_layers=arch.num_layers,
        num_attention_heads=arch.num_heads,
        num_key_value_heads=arch.num_kv_heads,
        max_position_embeddings=arch.max_position_embeddings,
        bos_token_id=pad,
        eos_token_id=eos,
        pad_token_id=pad,
        tie_word_embeddings=arch.tie_word_embeddings,
    )
    if arch.family == "qwen2.5-vl":
        from transformers import Qwen2_5_VLConfig

        section = list(arch.mrope_section or []) or default_mrope_section(arch.hidden_size // arch.num_heads)
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": arch.rope_theta, "mrope_section": section}
        return Qwen2_5_VLConfig(
            text_config=text,
            vision_config=qwen_vision_config(arch),
            image_token_id=ids["<|image_pad|>"],
            video_token_id=ids["<|video_pad|>"],
            vision_start_token_id=ids["<|vision_start|>"],
            vision_end_token_id=ids["<|vision_end|>"],
            tie_word_embeddings=arch.tie_word_embeddings,
        )
    from transformers import LlavaOnevisionConfig

    text["model_type"] = "qwen2"
    text["rope_parameters"] = {"rope_type": "default", "rope_theta": arch.rope_theta}
    return LlavaOnevisionConfig(
        vision_config=siglip_vision_config(arch),
        text_config=text,
        image_token_index=ids["<image>"] if ids["<image>"] is not None else ids["<video>"],
        video_token_index=ids["<video>"],
        vision_feature_layer=-1,
        vision_feature_select_strategy="full",
        image_grid_pinpoints=[[arch.image_size, arch.image_size]],
        tie_word_embeddings=arch.tie_word_embeddings,
    )


def qwen_vision_config(arch: ArchConfig) -> dict:
    """The vision-tower config of a Qwen2.5-VL ``arch`` (also what vision pretraining builds): its merger
    projects into the language model's width, ``arch.hidden_size``."""
    return dict(
        depth=arch.vision_layers,
        hidden_size=arch.vision_hidden_size,
        intermediate_size=arch.vision_intermediate_size or 2 * arch.vision_hidden_size,
        num_heads=arch.vision_heads,
        out_hidden_size=arch.hidden_size,
        patch_size=arch.patch_size,
        spatial_merge_size=2,
        temporal_patch_size=2,
        window_size=arch.window_size,
        # The last block attends over the whole frame pair; the others within windows.
        fullatt_block_indexes=[arch.vision_layers - 1],
        tokens_per_second=arch.tokens_per_second,
        **({"initializer_range": arch.vision_init_std} if arch.vision_init_std is not None else {}),
    )


def siglip_vision_config(arch: ArchConfig) -> dict:
    """The SigLIP vision-tower config of a LLaVA-OV ``arch`` (also what vision pretraining builds)."""
    return dict(
        model_type="siglip_vision_model",
        hidden_size=arch.vision_hidden_size,
        intermediate_size=arch.vision_intermediate_size or 2 * arch.vision_hidden_size,
        num_hidden_layers=arch.vision_layers,
        num_attention_heads=arch.vision_heads,
        image_size=arch.image_size,
        patch_size=arch.patch_size,
        vision_use_head=False,  # LLaVA-OV never uses SigLIP's pooling head
    )


def hf_model_class(family: str):
    """The transformers ``*ForConditionalGeneration`` class of a family."""
    import transformers

    if family not in HF_CLASSES:
        raise ConfigError(f"unknown family {family!r}; choose from {sorted(HF_CLASSES)}")
    return getattr(transformers, HF_CLASSES[family])


def family_of(config) -> str:
    """Family name of a transformers config (``config.model_type``)."""
    try:
        return MODEL_TYPES[config.model_type]
    except KeyError:
        raise ConfigError(f"model type {config.model_type!r} is not a supported Video-LLM ({sorted(MODEL_TYPES)})") from None
