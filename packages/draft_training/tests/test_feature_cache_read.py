"""The feature cache's "read" layout keeps only what training reads: the draft's batch from it equals the batch
from the full layout, in fewer bytes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    from test_sparrow_train import write_dataset

    return write_dataset(tmp_path_factory.mktemp("read-cache"), n_train=4, n_val=1)


@pytest.mark.parametrize("ivsb", [True, False])
@pytest.mark.parametrize("name", ["tiny-qwen2.5-vl", "tiny-llava-ov"])
def test_read_layout_gives_the_same_draft_batch_in_fewer_bytes(dataset, tmp_path, name, ivsb, caplog):
    from test_sparrow_train import a_batch

    from vidspec.draft_training.sparrow import SparrowDistillModule
    from vidspec.draft_training.sparrow.features import precompute_features

    m = SparrowDistillModule(target=name, draft={"ivsb": ivsb})
    batch = a_batch(m, dataset)
    sizes = {}
    for keep in ("all", "read"):
        with caplog.at_level("WARNING"):
            assert precompute_features(m, [batch], tmp_path / keep, progress=False, keep=keep) == 2
        assert f"--keep {keep}" in caplog.text and "bytes a text token" in caplog.text  # stated before the run
        sizes[keep] = sum(f.stat().st_size for f in (tmp_path / keep).glob("*.safetensors"))
        assert precompute_features(m, [batch], tmp_path / keep, progress=False, keep=keep) == 0  # resumable
    assert sizes["read"] < sizes["all"]
    dbs = {}
    for keep in ("all", "read"):
        c = SparrowDistillModule(target=name, draft={"ivsb": ivsb}, feature_cache=str(tmp_path / keep))
        dbs[keep] = c.draft_batch(batch, c.target_features(batch))
    for field in ("vis", "h_prev", "h_true", "positions", "target_logits", "sel", "tokens"):
        torch.testing.assert_close(getattr(dbs["read"], field), getattr(dbs["all"], field), rtol=0, atol=0)


def test_cache_build_runs_the_target_where_it_is(dataset, tmp_path):
    """A module whose draft sits elsewhere than its target (as a module built outside a Trainer: draft on the CPU,
    target loaded on the GPU) builds its cache with the target where it is; following the draft's device moved a
    7B target to the CPU (minutes an example). The meta device stands in for the other device here."""
    from test_sparrow_train import a_batch

    from vidspec.draft_training.sparrow import SparrowDistillModule
    from vidspec.draft_training.sparrow.features import precompute_features

    m = SparrowDistillModule(target="tiny-qwen2.5-vl")
    batch = a_batch(m, dataset)
    m.draft.to("meta")
    assert precompute_features(m, [batch], tmp_path / "c", progress=False) == 2
    assert m.target.device.type == "cpu" and (tmp_path / "c" / "features.json").is_file()
    assert "_ensure_target_device" not in m.__dict__  # the training step's placement is back
