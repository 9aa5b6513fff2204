"""The repository's size limits, checked before they break something far away.

- Issue 4 caps the committed releases (data/releases/) at about 30 MB of safetensors weights. With both families'
  sets (session 35) the weights are 29.9 MB and all their files 30.2 MB (configs, tokenizers, cards, manifests).
- A device call carries the tracked tree and the wheels (`.gpu/README.md`: `.whl-x`, 22.5 MB since session 28
  strips PyAV's libraries; 27.7 MB before) in at most 64 MiB. A tree past ~43.6 MB stops every GPU call
  (docs/RESULTS.md 26.7), which a session only learns when its first call is refused. Archived plots are stored as
  256-colour PNGs (session 28: 4.5 -> 1.6 MB). Since session 35 the tree holds two release sets and is over that
  limit; `.gpu/thin.sh` leaves the sets a call does not read (the Qwen2.5-VL one by default) out of its carry, so the
  check is on the tree without them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RELEASES_MB = 30.0  # safetensors weights
RELEASE_FILES_MB = 30.5  # every file of the sets
THIN = "data/releases/qwen2.5-vl/"  # .gpu/thin.sh's default: left out of device calls that do not read it
CARRY_MB = 64 * 2**20 / 1e6  # 67.1
WHEELS_MB = 22.5  # .whl-x as built by .gpu/wheels.sh (session 28: 19.9 MB av.txz, stripped, + 2.6 MB p.txz)
TREE_MB = CARRY_MB - WHEELS_MB - 1.0  # 1 MB of room for .gitsha and rounding


def _tracked_sizes() -> dict[str, int]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    paths = [p for p in out.decode().split("\0") if p]
    return {p: (REPO / p).stat().st_size for p in paths if (REPO / p).is_file()}


def test_releases_and_tree_fit_their_budgets():
    sizes = _tracked_sizes()
    releases = {p: n for p, n in sizes.items() if p.startswith("data/releases/")}
    weights = sum(n for p, n in releases.items() if p.endswith(".safetensors")) / 1e6
    assert weights <= RELEASES_MB, f"data/releases holds {weights:.2f} MB of weights, over issue 4's ~{RELEASES_MB:.0f} MB"
    assert sum(releases.values()) / 1e6 <= RELEASE_FILES_MB
    carried = {p: n for p, n in sizes.items() if not p.startswith(THIN)}
    tree = sum(carried.values()) / 1e6
    biggest = sorted(carried, key=carried.get, reverse=True)[:5]
    assert tree <= TREE_MB, (f"the tracked tree without {THIN} (.gpu/thin.sh) is {tree:.1f} MB; with the {WHEELS_MB} MB "
                             f"of wheels a device call would carry over 64 MiB. Largest files: {biggest}")
    # a call that reads the Qwen2.5-VL set instead carries it and leaves the LLaVA-OV one (THIN=...) behind
    llava = sum(n for p, n in carried.items() if p.startswith("data/releases/")) / 1e6
    thin_set = sum(n for p, n in sizes.items() if p.startswith(THIN)) / 1e6
    assert tree - llava + thin_set <= TREE_MB


def test_thin_leaves_a_set_out_and_restores_it(tmp_path):
    """`.gpu/thin.sh` untracks and ignores a release set (so a device call leaves it behind) and restores it as it
    was; it refuses to run over staged changes, which a commit would mix with the set's removal."""
    import shutil

    def git(*args):
        return subprocess.run(["git", *args], cwd=tmp_path, capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (tmp_path / ".gpu").mkdir()
    shutil.copy(REPO / ".gpu" / "thin.sh", tmp_path / ".gpu" / "thin.sh")
    (tmp_path / THIN).mkdir(parents=True)
    (tmp_path / THIN / "model.safetensors").write_bytes(b"w" * 10)
    (tmp_path / "keep.txt").write_text("k")
    git("add", ".")
    git("commit", "-q", "-m", "c")
    run = subprocess.run(["bash", ".gpu/thin.sh"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert not any(p.startswith(THIN) for p in git("ls-files").split())
    assert git("status", "--porcelain", "--untracked-files=all").split() == ["D", THIN + "model.safetensors"]
    assert (tmp_path / THIN / "model.safetensors").read_bytes() == b"w" * 10  # still on disk
    run = subprocess.run(["bash", ".gpu/thin.sh", "--restore"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert git("status", "--porcelain", "--untracked-files=all") == ""
    (tmp_path / "keep.txt").write_text("changed")
    git("add", "keep.txt")
    run = subprocess.run(["bash", ".gpu/thin.sh"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 2 and "staged changes" in run.stderr
