"""Small filesystem helpers shared by the packages that write folders (releases, datasets)."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path


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
