"""``vidspec demo``: the embedded default, end to end on a CPU in a few minutes.

Usage::

    vidspec demo                          # SynthVid validation videos, every method, table + report
    vidspec demo --limit 2 --out runs/my-demo
    vidspec demo --train                  # retrain the small CPU testbed models first (long)

It builds a small SynthVid validation set (cached under ``data/cache/demo-synthvid``), loads the
committed testbed releases from ``data/releases/`` (target, draft VLM, Sparrow draft) when they
exist, else the built-in random-weight tiny models, and says which is which; then it runs
:func:`~vidspec.evaluation.runner.run_eval` on every method, prints the table and writes the
report with plots into the output folder.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from vidspec.decoding.config import DEFAULT_LOOSE, PAPER_LOOSE, DecodeConfig
from vidspec.decoding.errors import ConfigError, VidspecError

#: Where committed releases live, and the recipes that retrain them (``--train``).
RELEASES_DIR = "data/releases"
TRAIN_RECIPES = {
    "target": "configs/train/synthvid-target-cpu.yaml",
    "draft": "configs/train/synthvid-draft-cpu.yaml",
    # The CPU Sparrow recipe; --train distils it from the target it has just retrained (see train_models).
    "sparrow": "configs/train/sparrow-tiny-cpu.yaml",
}
TINY_TARGET = "tiny-qwen2.5-vl"
#: The loose methods' rules in the demo: DecodeConfig's defaults (λ 1, a loose mismatch kept where the target
#: gives the draft's token p >= ε, no PST), or with ``paper_rule`` LVSpec's own (λ 0.7 by relevance, every loose
#: mismatch accepted); both come from vidspec.decoding.config, the one place they are defined.
DEMO_LOOSE = DEFAULT_LOOSE
TINY_DRAFT = "tiny-qwen2.5-vl-draft"


@dataclass
class ModelChoice:
    """Which models a demo or eval-ci run uses.

    Attributes:
        target: target model name or release folder.
        draft: draft VLM (None: the drafting methods cannot run).
        sparrow: Sparrow release folder, or ``"random"`` for an untrained in-process draft.
        source: ``"release"`` when the target is a committed release, else ``"tiny"``.
        missing: human-readable lines about what was looked for and not found.
    """

    target: str
    draft: str | None
    sparrow: str
    source: str
    missing: list[str] = field(default_factory=list)

    def describe(self) -> dict:
        """The models as eval-ci records them: names or folders, and each release's weights fingerprint."""
        out: dict = {"source": self.source, "target": self.target, "draft": self.draft, "sparrow": self.sparrow}
        prints = {role: fp for role in ("target", "draft", "sparrow") if (fp := _fingerprint(getattr(self, role)))}
        if prints:  # releases only: the built-in tiny models are made from their config and a seed
            out["fingerprints"] = prints
        return out


def _release_json(folder: str | Path | None, name: str) -> dict | None:
    """``folder/name`` of a release (its manifest or config) as a dict, or None when absent or unreadable."""
    f = Path(folder) / name if folder else None
    if f is None or not f.is_file():
        return None
    try:
        data = json.loads(f.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _fingerprint(path: str | None) -> str | None:
    """The ``fingerprint`` (sha256 of the weights) in a release folder's manifest, if it has one."""
    fp = (_release_json(path, "manifest.json") or {}).get("fingerprint")
    return str(fp) if fp else None


def _kind(path: Path) -> str | None:
    for name in ("manifest.json", "config.json"):
        data = _release_json(path, name)
        if data is None:
            continue
        if data.get("kind"):
            return str(data["kind"])
        if data.get("format") == "vidspec-sparrow":
            return "sparrow-draft"
    return None


def discover_models(releases_dir: str | Path = RELEASES_DIR) -> ModelChoice:
    """The committed testbed releases under ``releases_dir``, else the built-in tiny models.

    A release is a folder with a ``manifest.json``: ``kind: sparrow-draft`` is a Sparrow draft;
    ``kind: video-llm`` is the target, or the draft VLM when its folder name contains "draft".
    """
    root = Path(releases_dir)
    target = draft = sparrow = None
    if root.is_dir():
        for p in sorted(q for q in root.iterdir() if q.is_dir()):
            kind = _kind(p)
            if kind == "sparrow-draft":
                sparrow = sparrow or str(p)
            elif kind == "video-llm" or (p / "config.json").is_file():
                if "draft" in p.name:
                    draft = draft or str(p)
                else:
                    target = target or str(p)
    missing = []
    if target is None:
        missing.append(f"no target release in {root}/ (vidspec demo --train builds one): using the random-weight "
                       f"{TINY_TARGET}")
        if draft is not None:
            missing.append(f"draft release {draft} ignored: it belongs to a release target")
        choice = ModelChoice(TINY_TARGET, TINY_DRAFT, "random", "tiny", missing)
        if sparrow is not None and _sparrow_fits(sparrow, TINY_TARGET):
            choice.sparrow = sparrow
        else:
            missing.append(f"no Sparrow release for {TINY_TARGET} in {root}/: using a random-weight Sparrow draft")
        return choice
    if draft is None:
        missing.append(f"no draft VLM release in {root}/: sd, lvspec, lvspec-pst, fly and tree-sd are skipped")
    if sparrow is None or not _sparrow_fits(sparrow, target):
        missing.append(f"no Sparrow release for {target} in {root}/: using a random-weight Sparrow draft")
        sparrow = "random"
    return ModelChoice(target, draft, sparrow, "release", missing)


def _sparrow_fits(sparrow: str, target: str) -> bool:
    """Whether a Sparrow release was distilled from ``target`` (by its manifest's target id)."""
    for name in ("manifest.json", "config.json"):
        data = _release_json(sparrow, name) or {}
        tid = data.get("target_id") or data.get("target") or ""
        if tid:
            return Path(str(tid)).name == Path(target).name or str(tid) == target
    return False


def available_methods(choice: ModelChoice) -> tuple[str, ...]:
    """The methods the chosen models can run (tree methods included: the demo shows every method)."""
    from vidspec.decoding.methods import METHODS

    return tuple(m for m, spec in METHODS.items() if choice.draft is not None or spec.drafter != "vlm")


#: Seed of the SynthVid videos the demo and eval-ci evaluate on. Video i of a dataset is the scene
#: of ``SeedSequence([seed, i])`` whatever its split, so a "validation" set drawn with the training
#: seed (0 in every recipe and release) would repeat training scenes; this seed is kept for
#: held-out sets (``data/cache/synthvid-heldout`` uses it too) and must never be trained on.
HELDOUT_SEED = 1


def build_validation_set(path: str | Path, num_videos: int, seed: int = HELDOUT_SEED) -> Path:
    """A small SynthVid validation split (reused when already built with these settings)."""
    from vidspec.evaluation.synthvid import SynthVidConfig, generate_synthvid, is_synthvid_dataset
    from vidspec.evaluation.synthvid.world import WORLD_VERSION

    path = Path(path)
    # The CPU testbed is trained on easy 64x64 scenes (configs/train/synthvid-target-cpu.yaml).
    cfg = SynthVidConfig(num_videos=num_videos, seed=seed, preset="easy", size="64x64", split="validation",
                         mcq_per_video=1, open_per_video=0)
    stamp = path / "demo-config.json"
    want = json.dumps({"num_videos": num_videos, "seed": seed, "preset": "easy", "size": "64x64", "world": WORLD_VERSION})
    if is_synthvid_dataset(path) and stamp.is_file() and stamp.read_text() == want:
        return path
    if path.exists():
        import shutil

        shutil.rmtree(path)
    out = Path(generate_synthvid(path, cfg, progress=False))
    stamp.write_text(want)
    return out


def _recipe_commands(recipe: Path, prefix: str) -> list[list[str]]:
    """The ``vidspec ...`` commands a recipe's header states for ``prefix`` (e.g. "vidspec data")."""
    cmds, current = [], None
    for line in recipe.read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if current is not None:
            current += " " + text.rstrip("\\").strip()
            if not text.endswith("\\"):
                cmds.append(shlex.split(current))
                current = None
        elif text.startswith(prefix):
            current = text.rstrip("\\").strip()
            if not text.endswith("\\"):
                cmds.append(shlex.split(current))
                current = None
    return cmds


def train_steps(out: Path) -> tuple[list[tuple[str, list[list[str]], Path, Path]], list[str]]:
    """What ``--train`` runs, role by role, without running it: ``(role, commands, run folder, release folder)``
    per present recipe (``vidspec ...`` argument lists, the leading ``vidspec`` left out), and the lines
    saying which recipes are missing.

    Each recipe runs as the commands its header states: the data command, then ``vidspec train fit --config
    RECIPE``, then ``vidspec export`` into ``OUT/releases/<role>``. When the target is retrained too, the
    Sparrow draft is distilled from that target (its ``distill-data --target`` and the module's
    ``--model.init_args.target``), as ``vidspec testbed build`` wires it: a draft made for another target is
    refused at decoding time.
    """
    steps, missing = [], []
    target_release = out / "releases" / "target" if Path(TRAIN_RECIPES.get("target", "")).is_file() else None
    for role, recipe in TRAIN_RECIPES.items():
        path = Path(recipe)
        if not path.is_file():
            missing.append(f"--train: no recipe {recipe} yet ({role} not retrained)")
            continue
        # The data steps the recipe's header states (SynthVid; for Sparrow also the target's answers).
        data = [cmd[1:] for cmd in _recipe_commands(path, "vidspec data") + _recipe_commands(path, "vidspec distill-data")]
        run_dir = out / "train" / role
        fit = ["train", "fit", "--config", str(path), "--trainer.default_root_dir", str(run_dir)]
        if role == "sparrow" and target_release is not None:
            data = [_with_option(cmd, "--target", str(target_release)) if cmd[0] == "distill-data" else cmd
                    for cmd in data]
            fit += ["--model.init_args.target", str(target_release)]
        steps.append((role, [*data, fit], run_dir, out / "releases" / role))
    return steps, missing


def _with_option(cmd: list[str], flag: str, value: str) -> list[str]:
    """``cmd`` with ``flag``'s value replaced (or the pair appended)."""
    if flag in cmd[:-1]:
        i = cmd.index(flag)
        return [*cmd[: i + 1], value, *cmd[i + 2:]]
    return [*cmd, flag, value]


def train_models(out: Path) -> tuple[dict[str, str], list[str]]:
    """Retrain the CPU testbed models from their recipes (``--train``, the steps of :func:`train_steps`);
    returns (releases, missing)."""
    vidspec = [sys.executable, "-m", "vidspec.decoding.cli"]
    releases: dict[str, str] = {}
    steps, missing = train_steps(out)
    for role, commands, run_dir, rel in steps:
        for cmd in commands:
            _run_step(vidspec + cmd)
        recipe = Path(TRAIN_RECIPES[role])
        ckpts = sorted(run_dir.rglob("last.ckpt")) or sorted(Path("runs").glob(f"{recipe.stem}/**/last.ckpt"))
        if not ckpts:
            missing.append(f"--train: {recipe} wrote no last.ckpt")
            continue
        _run_step(vidspec + ["export", "--ckpt", str(ckpts[-1]), "--out", str(rel)])
        releases[role] = str(rel)
    return releases, missing


def _run_step(cmd: list[str]) -> None:
    print("$ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    if subprocess.run(cmd).returncode != 0:
        raise VidspecError(f"--train step failed: {' '.join(cmd[3:])}")


def run_demo(out: str | None = None, limit: int = 8, max_new_tokens: int = 40, data_dir: str | None = None,
             releases: str = RELEASES_DIR, train: bool = False, progress: bool = True, paper_rule: bool = False) -> int:
    """Run the demo; returns the exit status."""
    from vidspec.evaluation.records import CONVENTIONS
    from vidspec.evaluation.report import markdown_table, write_report
    from vidspec.evaluation.runner import EvalConfig, run_eval

    t0 = time.perf_counter()
    if limit < 1 or max_new_tokens < 1:
        raise ConfigError("--limit and --max-new-tokens must be >= 1")
    out_dir = Path(out or f"runs/demo-{time.strftime('%Y%m%d-%H%M%S')}")
    choice = discover_models(releases)
    if train:
        trained, missing = train_models(out_dir)
        if "target" in trained:
            choice = ModelChoice(trained["target"], trained.get("draft"), trained.get("sparrow", "random"), "release")
        choice.missing += missing
    print(f"vidspec demo: models: {choice.source} (target {choice.target}, draft {choice.draft}, "
          f"Sparrow {choice.sparrow})")
    for line in choice.missing:
        print(f"  missing: {line}")
    if choice.source == "tiny":
        print("  note: random-weight models write gibberish; speed and τ are real, fidelity is not meaningful")

    data = build_validation_set(Path(data_dir or "data/cache/demo-synthvid"), num_videos=max(limit, 1))
    methods = available_methods(choice)
    loose = PAPER_LOOSE if paper_rule else DEMO_LOOSE
    print("  loose methods: " + ("LVSpec's own rule (lam 0.7 by relevance, every loose mismatch accepted)" if paper_rule
                                 else "the defaults, a probability gate (lam 1, a mismatch kept where the target "
                                      f"gives the draft's token p >= {DEMO_LOOSE['eps']}, no PST); --paper_rule for "
                                      "LVSpec's own"))
    cfg = EvalConfig(benchmark="synthvid_captions", data=str(data), out=str(out_dir / "eval"), limit=limit,
                     target=choice.target, draft=choice.draft, sparrow=choice.sparrow, methods=methods,
                     max_new_tokens=max_new_tokens, progress=progress, decode=DecodeConfig(**loose))
    summary = run_eval(cfg)
    report = write_report(out_dir)
    print()
    print(f"SynthVid captions, {summary['n_samples']} validation videos, {max_new_tokens} new tokens max")
    print(markdown_table(summary["methods"]))
    print()
    print(CONVENTIONS)
    print(f"\nreport: {report} (plots in {out_dir / 'plots'}, TensorBoard: tensorboard --logdir {out_dir / 'tb'})")
    print(f"demo took {time.perf_counter() - t0:.0f} s")
    return 0
