"""Small filesystem helpers shared by the packages that write folders (releases, datasets, caches)."""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

log = logging.getLogger(__name__)


def replace_dir(tmp: Path, out: Path) -> None:
    """Move the finished folder ``tmp`` to ``out``, replacing an existing ``out``.

    Both renames are atomic on one filesystem, so a reader sees the old folder or the new one,
    never a half-written one; the old folder is deleted only after the new one is in place.
    """
    if out.exists():
        old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
        os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path to write ``path`` through: on a clean exit the file becomes ``path``, durably.

    The temporary is ``.<name>.<8 hex>`` beside ``path``. When the block ends (the caller has
    closed the file by then) it is fsynced, renamed over ``path`` with ``os.replace`` and the
    folder is fsynced, so a reader, or a rerun after a kill or a power loss, finds either no file
    or the whole file under ``path``. If the block raises (Ctrl-C included) the temporary file is
    removed; a SIGKILL leaves it behind, for :func:`remove_temps` on the next run.

    Example::

        with atomic_path(out / "shard-00000.jsonl") as tmp, open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    try:
        yield tmp
        _fsync(tmp, os.O_RDWR)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    # Make the rename itself durable; not every platform can open (or fsync) a directory.
    with contextlib.suppress(OSError):
        _fsync(path.parent, os.O_RDONLY)


def _fsync(path: Path, flags: int) -> None:
    # fsync flushes the file's (inode's) dirty data whichever descriptor wrote it, so the caller
    # may write with any library (json, safetensors) and close before this runs.
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_temps(folder: Path, pattern: re.Pattern[str]) -> None:
    """Delete the files in ``folder`` whose whole name matches ``pattern``.

    Meant for the temporaries :func:`atomic_path` names ``.<name>.<8 hex>`` that a killed run left:
    give a pattern that matches only the writer's own names (e.g.
    ``\\.(?:config\\.json|shard-\\d{5,}\\.jsonl)\\.[0-9a-f]{8}``), never anything else a user may keep there.
    """
    for p in folder.iterdir():
        if pattern.fullmatch(p.name) and p.is_file():
            log.info("removing %s, left by an interrupted run", p)
            p.unlink()


#: errno values of a file-system fault a user can fix (permissions, a read-only mount, a full disk or
#: quota, a file over the size limit), as opposed to a bug: the CLI reports them in one line, exit 2.
USER_FS_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def is_user_fs_error(e: BaseException) -> bool:
    """Whether ``e`` is an :class:`OSError` of :data:`USER_FS_ERRNOS`."""
    return isinstance(e, OSError) and e.errno in USER_FS_ERRNOS


def describe_fs_error(e: OSError, path: str | os.PathLike[str] | None = None) -> str:
    """One line naming the path and the cause of a file-system fault, and what a rerun does.

    Args:
        e: the error.
        path: the file or folder involved, when ``e`` does not carry it (a failed ``write`` names no file);
            default: the file being written where ``e`` was raised (:func:`file_in_traceback`).
    """
    where = e.filename if e.filename is not None else path
    if where is None:
        where = file_in_traceback(e.__traceback__)
    cause = e.strerror or (errno.errorcode.get(e.errno or 0) if e.errno else None) or str(e) or type(e).__name__
    text = f"{os.fsdecode(where)}: {cause}" if where is not None else f"file-system error: {cause}"
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        text += " (free some space and run the same command again: finished work is kept)"
    elif e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        text += " (choose a writable location, or fix its permissions)"
    return text


def file_in_traceback(tb: TracebackType | None) -> str | None:
    """The name of the open, writable file nearest to where an exception was raised, or None.

    A failed ``write`` or ``flush`` (a full disk) raises an :class:`OSError` without a file name. The
    file is then usually a local variable of one of the innermost frames, or an attribute of one
    (``self._fh``); the innermost such file is taken.
    """
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        for value in frame.f_locals.values():
            candidates = [value]
            if not isinstance(value, io.IOBase) and hasattr(value, "__dict__"):
                with contextlib.suppress(Exception):
                    candidates.extend(vars(value).values())
            for c in candidates:
                name = _writable_file_name(c)
                if name is not None:
                    return name
    return None


def _writable_file_name(obj: object) -> str | None:
    if not isinstance(obj, io.IOBase):
        return None
    try:
        if not obj.writable():
            return None
    except ValueError:  # closed, or detached
        pass
    name = getattr(obj, "name", None)
    if isinstance(name, (str, bytes, os.PathLike)):
        return os.fsdecode(name)
    return None
