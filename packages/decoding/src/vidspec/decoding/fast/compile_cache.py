"""Where torch.compile keeps its on-disk caches, so that a second process compiles less.

The fast engine compiles a few small functions (its per-layer step pieces, one variant per step
length, and the vision tower's blocks). Inductor keeps compiled graphs and autotuning results on
disk; by default under the system's temporary directory, which containers and reboots empty. The
fast engine points them at a user cache folder instead before its first compilation:

- ``$VIDSPEC_COMPILE_CACHE`` when set, else ``$XDG_CACHE_HOME/vidspec/torch-compile`` (``~/.cache/...``);
- only where the user has not chosen one: an existing ``TORCHINDUCTOR_CACHE_DIR`` is kept, unless it is
  torch's own default folder. Importing Dynamo writes that default into ``TORCHINDUCTOR_CACHE_DIR`` (torch
  resolves its cache folder at import and records it there), so a process that imported Dynamo before the
  fast engine compiled would otherwise keep the temporary folder: the default counts as unset.

A process then still traces the functions with Dynamo and looks their compiled code up (about a
second per compiled variant at 7B shape), but loads the compiled kernels instead of generating and
building them. The Triton kernels of :mod:`.kernels` use Triton's own cache (``~/.triton/cache``
unless ``TRITON_CACHE_DIR`` says otherwise), which persists already.

Opt-in, ``$VIDSPEC_COMPILE_ARTIFACTS`` (a file path): torch's portable cache artifacts ("mega cache",
``torch.compiler.save_cache_artifacts``) with Dynamo's caching precompile
(``torch._dynamo.config.caching_precompile``, experimental in torch), meant to let a later process also
skip Dynamo's tracing of the functions a warm-up compiled. On torch 2.11 at the 7B shape it did not: the
warm-up took longer with it (torch bypassed its AOTAutograd cache and loaded no Dynamo entry; docs/results.md,
section 11), so it is off unless asked for. What it does:

- before the first compilation, the file (when it exists) is loaded into the caches
  (``torch.compiler.load_cache_artifacts``): a fresh machine or container given the file starts warm;
- after a decoder's warm-up (:func:`vidspec.decoding.loops.warm.warm_up`), the process's artifacts
  (compiled graphs, autotuning, Dynamo's traced code and guards) are written to the file and to the
  cache folder.

Any failure of these experimental paths is logged and leaves the ordinary caches in charge: the
compiled code is torch's either way, so the tokens do not change.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

ENV = "VIDSPEC_COMPILE_CACHE"
#: A file of torch's portable compile artifacts (opt-in; see the module docstring).
ARTIFACTS_ENV = "VIDSPEC_COMPILE_ARTIFACTS"

_loaded: dict[str, bool] = {}  # artifact files this process has loaded already (path -> loaded)


def compile_cache_dir() -> Path:
    """The folder this module would use for Inductor's caches (not created)."""
    given = os.environ.get(ENV)
    if given:
        return Path(given).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "vidspec" / "torch-compile"


def artifacts_path() -> Path | None:
    """The portable artifacts file named by ``$VIDSPEC_COMPILE_ARTIFACTS`` (None: the option is off)."""
    given = os.environ.get(ARTIFACTS_ENV)
    return Path(given).expanduser() if given else None


def use_compile_cache() -> Path:
    """Point Inductor's on-disk caches at :func:`compile_cache_dir` (unless ``TORCHINDUCTOR_CACHE_DIR`` is set)
    and switch its graph and autotuning caches on; returns the folder in use. With
    ``$VIDSPEC_COMPILE_ARTIFACTS`` set, also switch Dynamo's caching precompile on and load the artifacts file
    (once per process).

    Call before the first ``torch.compile`` runs: Inductor fixes its folder at its first use. An unwritable
    folder leaves torch's default in place.
    """
    current = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if current and not _is_torch_default(current):
        path = Path(current)
    else:
        path = compile_cache_dir()
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError:
            return Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR", ""))
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)
        _forget_cache_paths()
    try:
        import torch._inductor.config as inductor_config

        inductor_config.fx_graph_cache = True
        inductor_config.autotune_local_cache = True
    except (ImportError, AttributeError):  # pragma: no cover - a torch build without Inductor
        pass
    artifacts = artifacts_path()
    if artifacts is not None:
        _load_artifacts(artifacts)
    return path


def _is_torch_default(folder: str) -> bool:
    """Whether ``folder`` is the cache folder torch picks when none is chosen (and writes into the environment)."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:  # pragma: no cover - a torch build without Inductor
        return False
    return os.path.abspath(folder) == os.path.abspath(default_cache_dir())


def _forget_cache_paths() -> None:
    """Drop the paths Inductor derived from its cache folder so far (none is expected before the first compile;
    cheap insurance after the folder changed)."""
    try:
        from torch._inductor.utils import clear_caches

        clear_caches()
    except Exception:  # noqa: BLE001 - a torch without it has nothing to forget
        pass


def _load_artifacts(artifacts: Path) -> bool:
    """Switch caching precompile on and load ``artifacts`` into torch's caches (once per process).

    Returns:
        Whether the file was loaded (False: absent, already loaded, or torch refused it).
    """
    key = str(artifacts)
    if key in _loaded:
        return False
    _loaded[key] = False
    try:
        import torch

        _precompile_on()
        if not artifacts.is_file():
            return False
        info = torch.compiler.load_cache_artifacts(artifacts.read_bytes())
        _loaded[key] = info is not None
        log.info("compile artifacts loaded from %s", artifacts)
    except Exception as e:  # noqa: BLE001 - an experimental torch path: the ordinary caches still work
        log.warning("compile artifacts in %s not used: %s", artifacts, str(e).splitlines()[0] if str(e) else type(e).__name__)
    return _loaded[key]


def _precompile_on() -> None:
    """Switch Dynamo's caching precompile on (process-wide; a torch without it is left as it is)."""
    import torch

    if hasattr(torch._dynamo.config, "caching_precompile"):
        torch._dynamo.config.caching_precompile = True


def save_compile_artifacts() -> Path | None:
    """Write this process's compile artifacts to ``$VIDSPEC_COMPILE_ARTIFACTS`` (when set).

    With Dynamo's caching precompile on, this also stores the traced functions in the cache folder (torch does
    that as part of the save). The file is replaced atomically.

    Returns:
        The file written, or None (the option is off, nothing was compiled, or torch failed: logged).
    """
    artifacts = artifacts_path()
    if artifacts is None:
        return None
    try:
        import torch

        saved = torch.compiler.save_cache_artifacts()
        if saved is None:
            return None
        data = saved[0]
        artifacts.parent.mkdir(parents=True, exist_ok=True)
        tmp = artifacts.with_name(artifacts.name + f".tmp{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, artifacts)
        log.info("compile artifacts (%d bytes) saved to %s", len(data), artifacts)
        return artifacts
    except Exception as e:  # noqa: BLE001 - an experimental torch path: the ordinary caches still work
        log.warning("compile artifacts not saved to %s: %s", artifacts, str(e).splitlines()[0] if str(e) else type(e).__name__)
        return None
