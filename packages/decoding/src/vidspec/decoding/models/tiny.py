"""Built-in tiny models for tests and CPU demos: real HF classes, random weights, built in-process.

``tiny-qwen2.5-vl`` and ``tiny-llava-ov`` are 2-layer targets; ``tiny-qwen2.5-vl-draft`` and
``tiny-llava-ov-draft`` are 1-layer drafts of the same family with another seed. All four share
the byte-level BPE tokenizer shipped in ``vidspec/decoding/assets/tiny-tokenizer`` (rebuilt by
:func:`build_tiny_tokenizer`; a test checks the shipped file is what the builder makes).
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass
from pathlib import Path

import torch

#: Special tokens the adapters rely on: Qwen-style chat and vision markers plus LLaVA's.
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|video_pad|>",
    "<|image_pad|>",
    "<video>",
    "<image>",
]

# A small English corpus written for the tiny tokenizer: words of video descriptions, so prompts
# and captions tokenize into a few hundred merges. Any text still encodes (byte-level).
_CORPUS = """
Describe the video in detail. What happens in this video? Please answer the question.
The video shows a red circle moving from the left to the right of the frame.
A blue square appears in the middle and then disappears. A green triangle rotates slowly.
There are two objects: a yellow star and a purple hexagon. The star grows while the hexagon shrinks.
Two bikes ride along a road. A rabbit walks across the grass near a tree in the forest.
The camera pans to the left. The person in the scene is wearing a white shirt and a black hat.
First the orange circle moves up, then the cyan square moves down, and finally they meet.
How many objects are there? Which object moves to the left? What colour is the triangle?
The answer is A. The answer is B. The answer is C. The answer is D. Yes. No. None of them.
In the beginning of the clip, a small car drives on the street; later a large truck follows it.
The background is gray. Nothing else happens. The scene is bright and the sky is blue.
""".strip()


def tiny_tokenizer_dir() -> Path:
    """The shipped tiny tokenizer folder (loadable with ``AutoTokenizer.from_pretrained``)."""
    return Path(str(importlib.resources.files("vidspec.decoding") / "assets" / "tiny-tokenizer"))


def build_tiny_tokenizer(vocab_size: int = 512):
    """Train the tiny byte-level BPE tokenizer on the embedded corpus.

    Deterministic: the same tokenizers version gives the same vocabulary.

    Returns:
        A ``PreTrainedTokenizerFast`` with :data:`SPECIAL_TOKENS`, eos ``<|im_end|>`` and pad
        ``<|endoftext|>``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS.splitlines(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )


def load_tiny_tokenizer():
    """Load the shipped tiny tokenizer."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir()))


@dataclass(frozen=True)
class TinySpec:
    """Sizes of one built-in tiny model.

    Attributes:
        family: "qwen2.5-vl" or "llava-ov".
        layers: decoder layers of the language model.
        seed: torch seed for the random weights.
    """

    family: str
    layers: int
    seed: int


TINY_MODELS: dict[str, TinySpec] = {
    "tiny-qwen2.5-vl": TinySpec("qwen2.5-vl", layers=2, seed=0),
    "tiny-qwen2.5-vl-draft": TinySpec("qwen2.5-vl", layers=1, seed=1),
    "tiny-llava-ov": TinySpec("llava-ov", layers=2, seed=0),
    "tiny-llava-ov-draft": TinySpec("llava-ov", layers=1, seed=1),
}

HIDDEN = 64
HEADS = 4
KV_HEADS = 2


def tiny_qwen_config(tokenizer, layers: int):
    """A Qwen2.5-VL config of hidden size 64 whose special token ids match ``tokenizer``."""
    from transformers import Qwen2_5_VLConfig

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    head_dim = HIDDEN // HEADS
    half = head_dim // 2  # M-RoPE splits the rotary half into (temporal, height, width)
    section = [half - 2 * (half // 3), half // 3, half // 3]
    return Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer),
            hidden_size=HIDDEN,
            intermediate_size=4 * HIDDEN,
            num_hidden_layers=layers,
            num_attention_heads=HEADS,
            num_key_value_heads=KV_HEADS,
            max_position_embeddings=32768,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section},
            bos_token_id=ids["<|endoftext|>"],
            eos_token_id=ids["<|im_end|>"],
            pad_token_id=ids["<|endoftext|>"],
            tie_word_embeddings=False,
        ),
        vision_config=dict(
            depth=2,
            hidden_size=32,
            intermediate_size=64,
            num_heads=2,
            out_hidden_size=HIDDEN,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
            window_size=56,
            fullatt_block_indexes=[1],
            tokens_per_second=2,
        ),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )


def tiny_llava_config(tokenizer, layers: int):
    """A LLaVA-OneVision config (SigLIP 56 px + Qwen2, hidden 64) matching ``tokenizer``."""
    from transformers import LlavaOnevisionConfig

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    return LlavaOnevisionConfig(
        vision_config=dict(
            model_type="siglip_vision_model",
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=56,
            patch_size=14,
        ),
        text_config=dict(
            model_type="qwen2",
            vocab_size=len(tokenizer),
            hidden_size=HIDDEN,
            intermediate_size=4 * HIDDEN,
            num_hidden_layers=layers,
            num_attention_heads=HEADS,
            num_key_value_heads=KV_HEADS,
            max_position_embeddings=32768,
            bos_token_id=ids["<|endoftext|>"],
            eos_token_id=ids["<|im_end|>"],
            pad_token_id=ids["<|endoftext|>"],
            tie_word_embeddings=False,
        ),
        image_token_index=ids["<image>"],
        video_token_index=ids["<video>"],
        vision_feature_layer=-1,
        vision_feature_select_strategy="full",
        image_grid_pinpoints=[[56, 56]],
        tie_word_embeddings=False,
    )


def build_tiny_model(name: str):
    """Build one of :data:`TINY_MODELS` with its seeded random weights.

    Returns:
        ``(model, tokenizer)``; the model is in eval mode, float32, on CPU.
    """
    from transformers import LlavaOnevisionForConditionalGeneration, Qwen2_5_VLForConditionalGeneration

    spec = TINY_MODELS[name]
    tokenizer = load_tiny_tokenizer()
    if spec.family == "qwen2.5-vl":
        config, cls = tiny_qwen_config(tokenizer, spec.layers), Qwen2_5_VLForConditionalGeneration
    else:
        config, cls = tiny_llava_config(tokenizer, spec.layers), LlavaOnevisionForConditionalGeneration
    # Seed only the construction, restoring the global RNG so callers' randomness is untouched.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = cls(config)
        # HF's default init (std 0.02) gives near-uniform logits; a larger scale on the LM head
        # makes greedy choices decisive, so draft/target agreement is not an accident of ties.
        with torch.no_grad():
            model.lm_head.weight.normal_(0.0, 0.5)
    model.eval()
    model.config.name_or_path = name
    return model, tokenizer
