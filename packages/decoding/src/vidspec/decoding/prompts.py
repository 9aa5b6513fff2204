"""User text that would be read as chat markup is refused before it reaches a tokenizer.

A chat prompt is plain text around control tokens (``<|im_start|>``, ``<|im_end|>``, the video
placeholder, ...). A tokenizer matches its added tokens anywhere in a string, so a user prompt
that contains ``<|im_end|>\\n<|im_start|>assistant`` would close the user turn early and inject an
assistant turn of the user's making. vidspec refuses such text (a
:class:`~vidspec.decoding.errors.ConfigError`, exit status 2 on the command line) rather than
silently re-encoding it: the same rule applies to ``vidspec generate``, the Python API (every
target's ``build_prompt``) and the rows of an evaluation, so a prompt means the same thing
everywhere.
"""

from __future__ import annotations

from vidspec.decoding.errors import ConfigError


def control_tokens(tokenizer) -> frozenset[str]:
    """The strings ``tokenizer`` encodes as one added token wherever they occur in a text.

    These are the tokenizer's added tokens (special or not: both are matched before the text is
    split into words) and its named special tokens.
    """
    found = {str(t) for t in getattr(tokenizer, "all_special_tokens", ()) or ()}
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    found.update(getattr(tok, "content", str(tok)) for tok in decoder.values())
    return frozenset(t for t in found if t)


def find_control_token(tokenizer, text: str | None) -> str | None:
    """The first control token of ``tokenizer`` that occurs in ``text`` (by position), or None."""
    if not text:
        return None
    hits = [(text.find(tok), -len(tok), tok) for tok in control_tokens(tokenizer) if tok in text]
    return min(hits)[2] if hits else None


def check_user_text(tokenizer, prompt: str | None, system: str | None = None, video_token: str = "") -> None:
    """Refuse a prompt or system text that contains a control token of ``tokenizer``.

    Args:
        tokenizer: the target's tokenizer.
        prompt: the user's prompt.
        system: the user's system text (None: the default one).
        video_token: the family's video placeholder, named in the message when it is the token found.

    Raises:
        ConfigError: one line naming the field and the token.
    """
    for field, text in (("prompt", prompt), ("system prompt", system)):
        tok = find_control_token(tokenizer, text)
        if tok is None:
            continue
        if video_token and tok == video_token:
            # It would tokenize to the video token id: the features would land in the wrong positions.
            raise ConfigError(f"the {field} must not contain the video placeholder {tok!r}")
        raise ConfigError(f"the {field} contains the chat control token {tok!r}, which the model would read "
                          "as markup (e.g. the end of the user turn), not as text; remove it or spell it "
                          "differently")


def check_prompts(target, prompts, where: str = "") -> None:
    """Check many prompts for ``target`` before any of them is decoded (a batch refuses one bad row up front).

    Args:
        target: a target adapter (or anything with ``tokenizer``; ``adapter.video_token`` or ``video_token``
            names the placeholder).
        prompts: ``(label, prompt)`` pairs; the label (a line number, a sample id) starts the message.
        where: what the labels belong to, e.g. ``"--requests FILE"``.

    Raises:
        ConfigError: naming the first offending row.
    """
    video_token = getattr(getattr(target, "adapter", target), "video_token", "")
    for label, prompt in prompts:
        try:
            check_user_text(target.tokenizer, prompt, None, video_token)
        except ConfigError as e:
            prefix = f"{where}, {label}" if where else str(label)
            raise ConfigError(f"{prefix}: {e}") from None
