"""``vidspec export``: safe checkpoint reading, model cards, Sparrow dtypes, and publishing on the Hub (offline)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch
import yaml

from vidspec.decoding.cli import main as vidspec

SYNTHVID = {"format": "synthvid", "format_version": 1, "world_version": 2, "splits": {"train": 3, "validation": 1},
            "config": {"num_videos": 4, "preset": "easy", "frames": 8, "size": "64x64"}}


def _checkpoint(root: Path, extra: dict | None = None) -> Path:
    """A checkpoint as ``vidspec train`` writes it, of an (untrained) Sparrow draft of the tiny Qwen2.5-VL, whose
    run config names absolute paths of this machine."""
    from vidspec.draft_training.sparrow.module import SparrowDistillModule

    data = root / "DATA"
    data.mkdir(parents=True, exist_ok=True)
    (data / "synthvid.json").write_text(json.dumps(SYNTHVID))
    module = SparrowDistillModule(target="tiny-qwen2.5-vl")
    run_config = {
        "trainer": {"accelerator": "cpu", "devices": 1, "precision": "32-true", "max_steps": 6,
                    "default_root_dir": str(root / "runs" / "sparrow")},
        "model": {"class_path": "vidspec.draft_training.sparrow.SparrowDistillModule",
                  "init_args": {"target": "tiny-qwen2.5-vl", "loss": {"mtp_steps": 2, "distill": "kl"},
                                "optim": {"lr": 0.003, "warmup_steps": 10}}},
        "data": {"path": str(data), "batch_size": 2, "caption_styles": ["alpha"], "frame_cache": str(data / "frames")},
    }
    ckpt = {"state_dict": module.state_dict(), "hyper_parameters": {"target": "tiny-qwen2.5-vl"},
            "vidspec": {"module": "vidspec.draft_training.sparrow.module.SparrowDistillModule",
                        "run_config": run_config, "metrics": {"global_step": 6, "train/sim_accept_len": 1.75},
                        "metrics_file": None},
            **(extra or {})}
    path = root / "runs" / "sparrow" / "checkpoints" / "last.ckpt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(ckpt, path)
    return path


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    return _checkpoint(tmp_path_factory.mktemp("run"))


def _front_matter(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


def test_the_card_has_valid_metadata_training_facts_and_no_machine_path(ckpt, tmp_path):
    out = tmp_path / "release"
    assert vidspec(["export", "--ckpt", str(ckpt), "--out", str(out), "--license", "apache-2.0"]) == 0
    card = (out / "README.md").read_text()
    meta = _front_matter(card)
    assert meta["library_name"] == "vidspec" and meta["license"] == "apache-2.0"
    assert {"sparrow", "speculative-decoding"} <= set(meta["tags"]) and meta["datasets"] == ["DATA"]
    from huggingface_hub import ModelCard

    assert ModelCard(card).data.library_name == "vidspec"  # huggingface_hub reads it back
    # the draft's Use section: the exact command and snippet for a draft (not for a target)
    assert "vidspec generate --target tiny-qwen2.5-vl --method sparrow --sparrow release" in card
    assert 'build_decoder("sparrow", target="tiny-qwen2.5-vl", draft="release")' in card
    # training facts come from the resolved config and the data manifest
    assert "distillation: kl loss over 2 multi-token prediction steps" in card
    assert "SynthVid, world version 2: 4 rendered videos" in card and "learning rate 0.003" in card
    assert "simulated acceptance length (train batches" in card
    manifest = (out / "manifest.json").read_text()
    for text in (card, manifest):
        assert str(tmp_path) not in text and str(ckpt.parent) not in text
        assert not any(s in text for s in ('"/tmp', '"/root', '"/work', '"/home', "`/tmp", "`/work"))
    assert json.loads(manifest)["data"]["world_version"] == 2


def test_a_target_card_tells_how_to_run_a_target():
    from vidspec.draft_training.cards import release_card

    card = str(release_card({"name": "synthvid-target", "kind": "video-llm", "metrics": {}}, "A model."))
    assert _front_matter(card)["pipeline_tag"] == "video-text-to-text"
    assert "vidspec generate --target synthvid-target --method ar" in card
    assert 'build_decoder("ar", target="synthvid-target")' in card


def test_a_hub_target_is_the_base_model():
    from vidspec.draft_training.cards import release_card

    man = {"name": "d", "kind": "sparrow-draft", "target_id": "Qwen/Qwen2.5-VL-7B-Instruct", "metrics": {}}
    assert _front_matter(str(release_card(man)))["base_model"] == "Qwen/Qwen2.5-VL-7B-Instruct"
    assert "base_model" not in _front_matter(str(release_card({**man, "target_id": "data/releases/synthvid-target"})))


def test_a_sparrow_draft_exports_in_bfloat16(ckpt, tmp_path):
    from safetensors import safe_open

    from vidspec.decoding.drafters.sparrow import SparrowDraftModel

    out = tmp_path / "half"
    assert vidspec(["export", "--ckpt", str(ckpt), "--out", str(out), "--dtype", "bfloat16"]) == 0
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}
    assert json.loads((out / "manifest.json").read_text())["weights_dtype"] == "bfloat16"
    assert SparrowDraftModel.from_pretrained(out).config.target_id == "tiny-qwen2.5-vl"
    assert vidspec(["export", "--ckpt", str(ckpt), "--out", str(tmp_path / "f16"), "--dtype", "float16"]) == 2


class _Payload:
    """An object whose unpickling runs code: it creates ``marker``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_pickled_object_never_runs_without_trust(tmp_path, capsys):
    marker = tmp_path / "ran"
    ckpt = _checkpoint(tmp_path, extra={"payload": _Payload(marker)})
    assert vidspec(["export", "--ckpt", str(ckpt), "--out", str(tmp_path / "release")]) == 2
    err = capsys.readouterr().err
    assert "--trust-checkpoint" in err and "run" in err and len(err.strip().splitlines()) == 1
    assert not marker.exists() and not (tmp_path / "release").exists()
    # with the flag the file is read as a full pickle (the payload runs: that is what the flag allows)
    assert vidspec(["export", "--ckpt", str(ckpt), "--out", str(tmp_path / "release"), "--trust-checkpoint"]) == 0
    assert marker.exists()


def test_plain_types_load_without_trust(tmp_path):
    from vidspec.draft_training.export import read_checkpoint

    path = tmp_path / "plain.ckpt"
    torch.save({"hyper_parameters": {"a": 1, "b": (0.9, 0.98)}, "where": Path("runs/x"), "w": torch.ones(2)}, path)
    got = read_checkpoint(path)
    assert got["hyper_parameters"] == {"a": 1, "b": (0.9, 0.98)} and got["where"] == Path("runs/x")
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)  # what the allow-list adds


class _FakeApi:
    """A stand-in for ``huggingface_hub.HfApi`` that records the operations."""

    calls: list = []

    def __init__(self, token=None):
        self.calls.append(("init", token))

    def create_repo(self, repo_id, **kw):
        self.calls.append(("create_repo", repo_id, kw))

    def create_branch(self, repo_id, **kw):
        self.calls.append(("create_branch", repo_id, kw))

    def upload_folder(self, **kw):
        folder = Path(kw["folder_path"])
        self.calls.append(("upload_folder", kw, sorted(p.name for p in folder.iterdir()),
                           (folder / "README.md").read_text()))
        return type("CommitInfo", (), {"commit_url": f"https://huggingface.co/{kw['repo_id']}/commit/abc"})()


def test_push_to_hub_creates_the_repository_and_uploads_the_folder(ckpt, tmp_path, monkeypatch, capsys):
    import huggingface_hub

    _FakeApi.calls = []
    monkeypatch.setattr(huggingface_hub, "HfApi", _FakeApi)
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    out = tmp_path / "release"
    assert vidspec(["export", "--ckpt", str(ckpt), "--out", str(out), "--push-to-hub", "me/sparrow-tiny",
                    "--private", "--revision", "v1"]) == 0
    names = [c[0] for c in _FakeApi.calls]
    assert names == ["init", "create_repo", "create_branch", "upload_folder"]
    assert _FakeApi.calls[0][1] == "hf_test_token"
    assert _FakeApi.calls[1][2]["private"] is True and _FakeApi.calls[1][2]["exist_ok"] is True
    upload, files, card = _FakeApi.calls[3][1], _FakeApi.calls[3][2], _FakeApi.calls[3][3]
    assert upload["repo_id"] == "me/sparrow-tiny" and upload["revision"] == "v1"
    assert {"config.json", "model.safetensors", "manifest.json", "README.md"} <= set(files)
    assert "--sparrow me/sparrow-tiny" in card  # the card names the repository users will type
    assert "https://huggingface.co/me/sparrow-tiny/commit/abc" in capsys.readouterr().out


def test_push_to_hub_without_a_token_is_a_clear_exit_2(ckpt, tmp_path, monkeypatch, capsys):
    import huggingface_hub

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no stored login
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    assert vidspec(["export", "--ckpt", str(ckpt), "--out", str(tmp_path / "r"), "--push-to-hub", "me/x"]) == 2
    assert "needs a Hugging Face token" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()  # refused before exporting


def test_portable_paths():
    from vidspec.draft_training.cards import portable

    tree = {"a": "/somewhere/else/DATA", "b": ["runs/x", "/root/.cache/thing"], "c": 3}
    assert portable(tree, root="/srv/checkout") == {"a": "DATA", "b": ["runs/x", "thing"], "c": 3}
    assert portable("/srv/checkout/runs/x/last.ckpt", root="/srv/checkout") == "runs/x/last.ckpt"


def test_a_tiny_trained_run_exports_a_card_with_valid_metadata_and_no_machine_path(tmp_path, tiny_dataset):
    """A real (two-step) ``vidspec train`` run of a tiny Video-LLM, whose recipe holds absolute paths of this
    machine, exports a card whose YAML parses and a manifest and card that name none of them."""
    from vidspec.draft_training.cli import run_cli
    from vidspec.draft_training.testing import tiny_recipe

    run = tmp_path / "run"
    run_cli(["fit", "--config", str(tiny_recipe(run, tiny_dataset, max_steps=2, every=2))])
    out = tmp_path / "release"
    assert vidspec(["export", "--ckpt", str(run / "checkpoints" / "last.ckpt"), "--out", str(out)]) == 0
    card = (out / "README.md").read_text()
    meta = _front_matter(card)
    assert meta["library_name"] == "vidspec" and meta["pipeline_tag"] == "video-text-to-text"
    assert "vidspec generate --target release --method ar" in card and "- steps: 2" in card
    for text in (card, (out / "manifest.json").read_text()):
        assert str(tmp_path) not in text and str(tiny_dataset) not in text
