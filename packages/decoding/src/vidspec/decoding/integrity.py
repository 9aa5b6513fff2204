"""Weights are checked against the sha256 fingerprint of their release manifest before they are used.

``vidspec export`` writes ``manifest.json`` beside the weights with ``"fingerprint"``: the sha256 over
the folder's ``*.safetensors`` files, sorted by name, each hashed as its name, a NUL byte, then its
bytes. A copy whose bytes changed inside a tensor (a flipped bit, a bad download, a file edited by
hand) still loads and runs, and would silently produce wrong text; :func:`verify_weights` refuses it.

Hashing costs about one read of the weights (a few seconds for a 7B checkpoint's 15 GB). A folder
that passed is remembered by each weight file's size, modification and change times and inode in a
small cache file (``$VIDSPEC_CACHE_DIR`` or ``$XDG_CACHE_HOME/vidspec``, else ``~/.cache/vidspec``,
file ``verified-weights.json``), so later loads of unchanged files skip the hash. Any write to a file
moves its change time, which no user can set back, so a changed file is hashed again.

The check is skipped with ``verify=False`` in the Python API, ``--no-verify`` on the command line,
or ``VIDSPEC_NO_VERIFY=1``. Folders without a manifest (e.g. a hub snapshot, which the hub client
already checked on download) have nothing to check against and load as they are.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from pathlib import Path

from vidspec.decoding.errors import ModelError

log = logging.getLogger(__name__)

MANIFEST_FILE = "manifest.json"
FINGERPRINT_KEY = "fingerprint"
#: Environment switch that turns the check off (the ``--no-verify`` flag sets it).
NO_VERIFY_ENV = "VIDSPEC_NO_VERIFY"
CACHE_FILE = "verified-weights.json"
_CHUNK = 8 << 20


def weight_files(folder: Path) -> list[Path]:
    """The files the fingerprint covers: ``*.safetensors`` in ``folder``, sorted by name."""
    return sorted(Path(folder).glob("*.safetensors"))


def fingerprint(folder: str | Path) -> str:
    """sha256 over the folder's weight files: for each, its name, a NUL byte, then its bytes.

    Raises:
        ModelError: the folder holds no ``.safetensors`` file, or one cannot be read.
    """
    folder = Path(folder)
    files = weight_files(folder)
    if not files:
        raise ModelError(f"{folder}: no .safetensors weights to fingerprint")
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0")
        try:
            with f.open("rb", buffering=0) as fh:
                buf = bytearray(_CHUNK)
                view = memoryview(buf)
                while n := fh.readinto(buf):
                    h.update(view[:n])
        except OSError as e:
            raise ModelError(f"cannot read {f}: {e.strerror or e}") from None
    return h.hexdigest()


def verify_enabled(verify: bool | None = None) -> bool:
    """Whether to check: ``verify`` when given, else on unless ``VIDSPEC_NO_VERIFY=1``."""
    if verify is not None:
        return bool(verify)
    return os.environ.get(NO_VERIFY_ENV, "") not in ("1", "true", "yes")


def cache_path() -> Path:
    """The file that remembers verified folders (see the module docstring)."""
    base = os.environ.get("VIDSPEC_CACHE_DIR")
    if not base:
        base = str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vidspec")
    return Path(base) / CACHE_FILE


def _file_state(files: list[Path]) -> list[list]:
    out = []
    for f in files:
        st = f.stat()
        out.append([f.name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino])
    return out


def _read_cache() -> dict:
    try:
        data = json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _remember(key: str, entry: dict) -> None:
    """Record a verified folder; a cache that cannot be written only costs a hash next time."""
    from vidspec.decoding.fsutil import atomic_path

    path = cache_path()
    data = _read_cache()
    data[key] = entry
    if len(data) > 256:  # keep the file small: the oldest entries (insertion order) go first
        data = dict(list(data.items())[-256:])
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(data, indent=0, sort_keys=True))


def verify_weights(folder: str | Path, *, verify: bool | None = None, name: str | None = None) -> bool:
    """Refuse a folder whose weights differ from its manifest's fingerprint.

    Args:
        folder: a model or release folder.
        verify: force the check on or off (default: on unless ``VIDSPEC_NO_VERIFY=1``).
        name: how the user named the folder, for the message (default: the folder path).

    Returns:
        True if the weights were checked (hashed now or found unchanged since a check), False if
        there was nothing to check (no manifest or no fingerprint in it) or the check is off.

    Raises:
        ModelError: the fingerprint does not match, or the manifest is not valid JSON.
    """
    folder = Path(folder)
    shown = name or str(folder)
    if not verify_enabled(verify):
        return False
    manifest = folder / MANIFEST_FILE
    if not manifest.is_file():
        return False
    try:
        want = json.loads(manifest.read_text()).get(FINGERPRINT_KEY)
    except (OSError, ValueError, AttributeError) as e:
        raise ModelError(f"{shown}/{MANIFEST_FILE} cannot be read as a JSON object ({e})") from None
    if not isinstance(want, str) or not want:
        return False
    files = weight_files(folder)
    key = str(folder.resolve())
    try:
        state = _file_state(files)
    except OSError as e:
        raise ModelError(f"{shown}: cannot read its weight files ({e.strerror or e})") from None
    entry = {"fingerprint": want, "files": state}
    if _read_cache().get(key) == entry:
        return True
    have = fingerprint(folder) if files else "(no .safetensors files)"
    if have != want:
        raise ModelError(
            f"{shown}: the weights do not match the sha256 fingerprint in {MANIFEST_FILE} "
            f"({have[:16]}... vs {want[:16]}...): a corrupt or changed copy; download or export it again, "
            f"or pass --no-verify to load it anyway")
    log.debug("%s: weights match the manifest fingerprint", shown)
    _remember(key, entry)
    return True


def check_torch_file(path: str | Path, what: str = "checkpoint") -> None:
    """Refuse a torch file (``torch.save``'s zip format) that is missing, truncated or not a torch file.

    Reads only the zip's central directory at the end of the file (a file cut short by a kill or a
    full disk has none), so it costs milliseconds even for a large checkpoint.

    Raises:
        ConfigError: one line naming the file and the cause.
    """
    import zipfile

    from vidspec.decoding.errors import ConfigError

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{what} {p}: no such file")
    try:
        size = p.stat().st_size
        with zipfile.ZipFile(p) as z:
            infos = z.infolist()
    except zipfile.BadZipFile:
        with contextlib.suppress(OSError), p.open("rb") as fh:
            if fh.read(2) == b"\x80\x02":  # the legacy (pre-zip) pickle format: nothing cheap to check
                return
        raise ConfigError(f"{what} {p} is truncated or not a torch checkpoint ({size} bytes, no zip directory "
                          "at its end): it was cut short while being written, or is another file; use an earlier "
                          "checkpoint or start again") from None
    except OSError as e:
        raise ConfigError(f"cannot read {what} {p}: {e.strerror or e}") from None
    if not infos or not any(i.filename.endswith("data.pkl") for i in infos):
        raise ConfigError(f"{what} {p} is a zip file but not a torch checkpoint (no data.pkl)")
    if any(i.header_offset + i.compress_size > size for i in infos):
        raise ConfigError(f"{what} {p} is truncated (its entries reach past its {size} bytes)")
