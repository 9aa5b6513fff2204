"""The repository's size limits, checked before they break something far away.

- Issue 4 caps the committed releases (data/releases/) at about 30 MB.
- A device call carries the tracked tree and the wheels (`.gpu/README.md`: `.whl-x`, 22.5 MB since session 28
  strips PyAV's libraries; 27.7 MB before) in at most 64 MiB. A tree past ~43.6 MB stops every GPU call
  (docs/RESULTS.md 26.7), which a session only learns when its first call is refused. Archived plots are stored as
  256-colour PNGs (session 28: 4.5 -> 1.6 MB).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RELEASES_MB = 30.0
CARRY_MB = 64 * 2**20 / 1e6  # 67.1
WHEELS_MB = 22.5  # .whl-x as built by .gpu/wheels.sh (session 28: 19.9 MB av.txz, stripped, + 2.6 MB p.txz)
TREE_MB = CARRY_MB - WHEELS_MB - 1.0  # 1 MB of room for .gitsha and rounding


def _tracked_sizes() -> dict[str, int]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    paths = [p for p in out.decode().split("\0") if p]
    return {p: (REPO / p).stat().st_size for p in paths if (REPO / p).is_file()}


def test_releases_and_tree_fit_their_budgets():
    sizes = _tracked_sizes()
    releases = sum(n for p, n in sizes.items() if p.startswith("data/releases/")) / 1e6
    tree = sum(sizes.values()) / 1e6
    assert releases <= RELEASES_MB, f"data/releases holds {releases:.1f} MB, over issue 4's ~{RELEASES_MB:.0f} MB"
    biggest = sorted(sizes, key=sizes.get, reverse=True)[:5]
    assert tree <= TREE_MB, (f"the tracked tree is {tree:.1f} MB; with the {WHEELS_MB} MB of wheels a device call "
                             f"would carry over 64 MiB. Largest files: {biggest}")
