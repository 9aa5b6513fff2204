"""Hub ids without a network: use the local cache, or fail at once with one line.

Asked for a repository it cannot reach, the Hugging Face client retries every file with back-off
(about 25 seconds and a screen of warnings before the error). Before any download vidspec asks
itself whether the hub can answer at all: ``HF_HUB_OFFLINE`` is set, or one TCP connection to the
hub's host (or to the HTTPS proxy, when one is configured) fails within a few seconds. If it
cannot, a repository already in the local cache loads from there (``local_files_only``) and any
other repository is refused with a :class:`~vidspec.decoding.errors.ModelError` that says why.
"""

from __future__ import annotations

import functools
import os
import socket
from urllib.parse import urlsplit

from vidspec.decoding.errors import ModelError

DEFAULT_ENDPOINT = "https://huggingface.co"
#: Seconds one connection attempt may take before the hub counts as unreachable.
PROBE_TIMEOUT_S = 3.0
_TRUE = ("1", "true", "yes", "on")


def _offline_env() -> bool:
    return any(os.environ.get(k, "").strip().lower() in _TRUE for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _probe_address() -> tuple[str, int, str]:
    """``(host, port, what)`` to connect to: the HTTPS proxy if one is set, else the hub endpoint."""
    for key in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        proxy = os.environ.get(key)
        if proxy:
            parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
            if parts.hostname:
                return parts.hostname, parts.port or 8080, f"the proxy {parts.hostname}:{parts.port or 8080}"
    endpoint = os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    parts = urlsplit(endpoint)
    host = parts.hostname or "huggingface.co"
    port = parts.port or (80 if parts.scheme == "http" else 443)
    return host, port, f"{host}:{port}"


@functools.cache
def hub_unreachable() -> str | None:
    """Why the hub cannot be reached from this machine (None if a connection opened). Asked once per process."""
    host, port, what = _probe_address()
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
            return None
    except OSError as e:
        cause = e.strerror or str(e) or type(e).__name__
        return f"{what} cannot be reached ({cause})"


def offline_reason() -> str | None:
    """Why downloads are off (``HF_HUB_OFFLINE`` or no network), or None when the hub is reachable."""
    if _offline_env():
        return "HF_HUB_OFFLINE is set"
    return hub_unreachable()


def in_local_cache(repo_id: str, filename: str = "config.json", revision: str | None = None) -> bool:
    """Whether ``filename`` of ``repo_id`` is already in the local Hugging Face cache."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, filename, revision=revision), str)
    except Exception:  # an odd id or an unreadable cache: not usable offline
        return False


def local_only(repo_id: str, what: str = "model", filename: str = "config.json", revision: str | None = None) -> bool:
    """Decide how to fetch ``repo_id``: True to load it from the local cache only, False to download.

    Args:
        repo_id: the hub id (``org/name``).
        what: how the message names it ("model", "Sparrow release", ...).
        filename: a file every snapshot of it has, to look for in the cache.
        revision: the revision asked for.

    Raises:
        ModelError: downloads are off or impossible and the repository is not in the local cache.
    """
    reason = offline_reason()
    if reason is None:
        return False
    if in_local_cache(repo_id, filename, revision):
        return True
    raise ModelError(f"cannot load the {what} {repo_id!r}: it is not in the local Hugging Face cache and "
                     f"{reason}; connect to the network, download it first, or give a local folder")
