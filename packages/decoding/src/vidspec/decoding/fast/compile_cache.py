"""Where torch.compile keeps its on-disk caches, so that a second process compiles less.

The fast engine compiles a few small functions (its per-layer step pieces, one variant per step
length, and the vision tower's blocks). Inductor keeps compiled graphs and autotuning results on
disk; by default under the system's temporary directory, which containers and reboots empty. The
fast engine points them at a user cache folder instead before its first compilation:

- ``$VIDSPEC_COMPILE_CACHE`` when set, else ``$XDG_CACHE_HOME/vidspec/torch-compile`` (``~/.cache/...``);
- only where the user has not chosen one: an existing ``TORCHINDUCTOR_CACHE_DIR`` is kept.

A process then still traces the functions (seconds), but loads the compiled kernels instead of
generating and building them. The Triton kernels of :mod:`.kernels` use Triton's own cache
(``~/.triton/cache`` unless ``TRITON_CACHE_DIR`` says otherwise), which persists already.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "VIDSPEC_COMPILE_CACHE"


def compile_cache_dir() -> Path:
    """The folder this module would use for Inductor's caches (not created)."""
    given = os.environ.get(ENV)
    if given:
        return Path(given).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "vidspec" / "torch-compile"


def use_compile_cache() -> Path:
    """Point Inductor's on-disk caches at :func:`compile_cache_dir` (unless ``TORCHINDUCTOR_CACHE_DIR`` is set)
    and switch its graph and autotuning caches on; returns the folder in use.

    Call before the first ``torch.compile`` runs: Inductor fixes its folder at its first use. An unwritable
    folder leaves torch's default in place.
    """
    current = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if current:
        path = Path(current)
    else:
        path = compile_cache_dir()
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError:
            return Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR", ""))
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)
    try:
        import torch._inductor.config as inductor_config

        inductor_config.fx_graph_cache = True
        inductor_config.autotune_local_cache = True
    except (ImportError, AttributeError):  # pragma: no cover - a torch build without Inductor
        pass
    return path
