"""What the tracked tree must stay: small, self-contained and free of the machine it was written on.

- The committed release weights (``data/releases/``) are limited to about 30 MB, so that a clone stays quick and a
  CPU machine still gets trained models without training.
- The tree is a product, not an archive of runs: a few hundred tracked files, no symlinks (they break on the
  machines and archives the tree is copied to), no absolute paths of the machine a file was written on, and no
  pointers to run numbers, issue numbers or documents outside the repository.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RELEASE_WEIGHTS_MB = 30.0  # safetensors under data/releases/
MAX_TRACKED_FILES = 400
#: absolute paths of a particular machine: a workspace, a home folder or a temporary folder
MACHINE_PATH = re.compile(r"(?<![\w.~$-])/(?:work|root|home|tmp)/")
#: words that point at the project's history or outside the tree instead of stating what and why
HISTORY_WORDS = r"[Ss]ession [0-9]|[Ii]ssue [0-9]|\.\./shared"


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout


def _tracked() -> list[str]:
    return [p for p in _git("ls-files", "-z").split("\0") if p]


def test_release_weights_fit_their_budget():
    weights = [p for p in _tracked() if p.startswith("data/releases/") and p.endswith(".safetensors")]
    assert weights, "no committed release weights found"
    mb = sum((REPO / p).stat().st_size for p in weights) / 1e6
    assert mb <= RELEASE_WEIGHTS_MB, f"data/releases holds {mb:.2f} MB of weights, over the ~{RELEASE_WEIGHTS_MB:.0f} MB budget"


def test_tracked_file_count_stays_small():
    n = len(_tracked())
    assert n < MAX_TRACKED_FILES, f"{n} tracked files (budget {MAX_TRACKED_FILES}): keep only what the product needs"


def test_no_symlinks_are_tracked():
    links = [line.split("\t", 1)[1] for line in _git("ls-files", "-s").splitlines() if line.startswith("120000 ")]
    assert not links, f"tracked symlinks: {links}"


def test_no_tracked_file_holds_a_machine_path():
    hits = []
    for p in _tracked():
        path = REPO / p
        # Tests build such paths on purpose, to check that exports and cards strip them.
        if p.startswith("tests/") or "/tests/" in p:
            continue
        if not path.is_file() or path.stat().st_size > 2_000_000:
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:  # binary (weights, images, gzip)
            continue
        for i, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if MACHINE_PATH.search(line):
                hits.append(f"{p}:{i}: {line.strip()[:120]}")
    assert not hits, "absolute machine paths in tracked files:\n" + "\n".join(hits[:40])


def test_no_history_words_in_the_tree():
    out = subprocess.run(["git", "grep", "-nIE", HISTORY_WORDS], cwd=REPO, capture_output=True, text=True)
    assert out.returncode in (0, 1), out.stderr
    assert out.stdout == "", "run/issue numbers or pointers outside the tree:\n" + out.stdout[:4000]
