"""The SynthVid tokenizer: a small Hugging Face fast tokenizer built in process.

Design: a regex pre-tokenizer splits text into words with their leading space (``" red"``),
single punctuation marks and single whitespace characters; a Unigram model whose vocabulary holds
every grammar word in three forms (``" red"``, ``"Red"``, ``" Red"``) with a high score, every
printable ASCII character with a low score, and the 256 byte tokens ``<0x00>``..``<0xFF>`` for
byte fallback. Viterbi segmentation therefore keeps every grammar word whole (so per-token labels
are exact), spells unknown words character by character, and never produces an unknown token;
a ``Fuse`` decoder makes ``decode(encode(text)) == text`` for grammar text.

Special tokens follow Qwen2.5-VL's names, which the model adapters rely on.

Usage::

    tok = build_tokenizer()
    tok.save_pretrained("out/tokenizer")
    tok = load_tokenizer("out/tokenizer")
    labels = token_labels(tok("A red circle moves left.")["input_ids"], tok)
"""

from __future__ import annotations

from pathlib import Path

from vidspec.decoding.errors import ConfigError
from vidspec.evaluation.synthvid import grammar, questions
from vidspec.evaluation.synthvid.world import BACKGROUNDS, COLOURS, EVENTS, MOTIONS, SHAPES, SIZES

PAD = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (
    PAD,
    IM_START,
    IM_END,
    "<|vision_start|>",
    "<|vision_end|>",
    "<|video_pad|>",
    "<|image_pad|>",
    "<video>",
    "<image>",
)
UNK = "<unk>"
#: Words that open a chat turn right after ``<|im_start|>``, so they also need a bare form.
ROLE_WORDS = ("system", "user", "assistant")

#: A Qwen-style ChatML template; a video in a user turn becomes the vision block.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'video' %}"
    "{{ '<|vision_start|><|video_pad|><|vision_end|>' }}{% elif part['type'] == 'image' %}"
    "{{ '<|vision_start|><|image_pad|><|vision_end|>' }}{% else %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}{{ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Words with a leading space, punctuation marks, single whitespace characters.
_SPLIT = r" ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]|\s"


def vocabulary_words() -> list[str]:
    """Every lowercase word of the grammar and the question templates, sorted."""
    words: set[str] = set()
    for group in (*grammar.PHRASE_SETS, *questions.PHRASE_SETS):
        for phrase in group:
            for w in phrase.replace(".", " ").replace(",", " ").replace("?", " ").replace("'", " ").split():
                words.add(w.lower())
    words |= set(COLOURS) | set(BACKGROUNDS) | set(SHAPES) | set(grammar.PLURALS.values())
    words |= set(SIZES) | set(MOTIONS) | set(EVENTS) | set(grammar.COUNT_WORDS) | set(grammar.WORD_LABELS)
    words |= set(ROLE_WORDS) | {"no", "not", "none", "nothing", "there", "is", "are", "s", "does", "t"}
    return sorted(words)


def build_tokenizer():
    """Build the SynthVid tokenizer (a ``transformers.PreTrainedTokenizerFast``)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab: list[tuple[str, float]] = [(t, 0.0) for t in SPECIAL_TOKENS]
    vocab.append((UNK, 0.0))
    vocab += [(f"<0x{b:02X}>", -30.0) for b in range(256)]
    seen = {t for t, _ in vocab}

    def add(piece: str, score: float) -> None:
        if piece not in seen:
            seen.add(piece)
            vocab.append((piece, score))

    # Printable ASCII, newline and tab: unknown words are spelled out, not byte-encoded.
    for ch in ["\n", "\t", *(chr(c) for c in range(32, 127))]:
        add(ch, -10.0)
    for w in vocabulary_words():
        for form in (" " + w, w.capitalize(), " " + w.capitalize()):
            add(form, -1.0)
    for w in ROLE_WORDS:
        add(w, -1.0)
    model = models.Unigram(vocab, unk_id=len(SPECIAL_TOKENS), byte_fallback=True)
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(_SPLIT), behavior="isolated")
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        eos_token=IM_END,
        unk_token=UNK,
        clean_up_tokenization_spaces=False,
        model_max_length=1 << 20,
    )
    fast.add_special_tokens({"additional_special_tokens": [t for t in SPECIAL_TOKENS if t not in (PAD, IM_END)]})
    fast.chat_template = CHAT_TEMPLATE
    return fast


def load_tokenizer(path: str | Path):
    """Load a tokenizer saved by :func:`build_tokenizer` (``DIR/tokenizer`` of a SynthVid dataset).

    Raises:
        ConfigError: ``path`` holds no tokenizer.
    """
    from transformers import PreTrainedTokenizerFast

    path = Path(path)
    if path.is_dir() and (path / "tokenizer").is_dir() and not (path / "tokenizer.json").exists():
        path = path / "tokenizer"
    if not (path / "tokenizer.json").is_file():
        raise ConfigError(f"no SynthVid tokenizer in {path} (expected tokenizer.json)")
    return PreTrainedTokenizerFast.from_pretrained(str(path), clean_up_tokenization_spaces=False)


def token_labels(token_ids, tokenizer) -> list[str]:
    """Per-token labels of a tokenized caption.

    Args:
        token_ids: a sequence (or 1-D tensor) of token ids.
        tokenizer: the SynthVid tokenizer.

    Returns:
        One label per token: a visual category (``colour``, ``shape``, ``size``, ``motion``,
        ``count``, ``event``), ``filler`` for every other grammar word, punctuation, or piece of an
        unknown word, and ``special`` for special tokens.
    """
    ids = [int(i) for i in token_ids]
    special = set(tokenizer.all_special_ids)
    pieces = tokenizer.convert_ids_to_tokens(ids)
    return ["special" if i in special else grammar.word_label(p) for i, p in zip(ids, pieces)]


def visual_mask(token_ids, tokenizer) -> list[bool]:
    """True for tokens labelled with a visual category (see :func:`token_labels`)."""
    return [lab in grammar.VISUAL_LABELS for lab in token_labels(token_ids, tokenizer)]
