"""Ctrl-C always stops a run, even when it lands inside an object's ``__del__``.

Python delivers SIGINT as a :class:`KeyboardInterrupt` raised in whatever Python code runs at that
moment. If that is a finaliser (``__del__``, e.g. decord's ``VideoReader`` freeing its decoder when
a video read ends), the exception cannot propagate: the interpreter prints "Exception ignored in
..." and carries on, and the interrupt is lost. :func:`install` chains a ``sys.unraisablehook``
that remembers such a swallowed interrupt; :func:`raise_if_interrupted`, called where vidspec
finishes a step that may run finalisers (after each video read) and by the ``vidspec`` command
before it reports success, raises it again. The run then ends as any interrupted run does: exit
status 130, with the records written so far kept for a rerun to resume from.
"""

from __future__ import annotations

import sys
import threading

_pending = threading.Event()
_installed = False
_lock = threading.Lock()


def _hook(previous):
    def hook(unraisable) -> None:
        exc_type = getattr(unraisable, "exc_type", None)
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            _pending.set()  # raised again at the next check; nothing printed
            return
        previous(unraisable)

    hook.vidspec_interrupts = True  # type: ignore[attr-defined]
    return hook


def install() -> None:
    """Chain the hook that remembers interrupts swallowed by finalisers (once per process)."""
    global _installed
    with _lock:
        if _installed and getattr(sys.unraisablehook, "vidspec_interrupts", False):
            return
        if not getattr(sys.unraisablehook, "vidspec_interrupts", False):
            sys.unraisablehook = _hook(sys.unraisablehook)
        _installed = True


def interrupted() -> bool:
    """Whether an interrupt was swallowed by a finaliser and not raised again yet."""
    return _pending.is_set()


def raise_if_interrupted() -> None:
    """Raise :class:`KeyboardInterrupt` if a finaliser swallowed one since the last check."""
    if _pending.is_set():
        _pending.clear()
        raise KeyboardInterrupt


def clear() -> None:
    """Forget a swallowed interrupt (the caller has handled it)."""
    _pending.clear()
