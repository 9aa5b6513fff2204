"""benchmarks/vision_learnability.py: the scenes a tower pretrains on do not depend on how many processes render them."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from vision_learnability import make_data  # noqa: E402


def test_rendering_workers_change_nothing_but_time() -> None:
    one = make_data(9, 3, "easy", 32)
    two = make_data(9, 3, "easy", 32, workers=2)
    for a, b in zip(one[:3], two[:3]):
        assert torch.equal(a, b)
    assert one[3] == two[3]
    first, last, labels, classes = one
    assert first.shape == last.shape == (9, 3, 32, 32)
    assert not torch.equal(first, last)  # the objects move between the first and the last frame
    assert labels.shape == (9, 3) and all(int(labels[:, i].max()) < classes[i] for i in range(3))


def test_qwen_family_pretrains_and_saves_a_tower_for_the_target_width(tmp_path) -> None:
    import json

    from vision_learnability import main

    torch.set_num_threads(1)
    assert main(["--configs", "h32_l1_p8_lr1e-3_b4_n2", "--steps", "2", "--train", "8", "--test", "4", "--every", "2",
                 "--size", "32", "--device", "cpu", "--family", "qwen2.5-vl", "--lm-hidden", "64",
                 "--out", str(tmp_path / "out"), "--save", str(tmp_path / "tower")]) == 0
    saved = json.loads((tmp_path / "tower" / "tower.json").read_text())["arch"]
    assert saved["family"] == "qwen2.5-vl" and saved["hidden_size"] == 64 and saved["vision_hidden_size"] == 32
    from safetensors.torch import load_file

    state = load_file(str(tmp_path / "tower" / "tower.safetensors"))
    assert any(k.startswith("merger.") for k in state) and state["merger.mlp.2.weight"].shape[0] == 64


def test_config_names_parse_the_qwen_init_std() -> None:
    from vision_learnability import arch_of, parse_config

    c = parse_config("h128_l4_p8_lr5e-4_b128_n4_is0.088")
    assert (c["hidden"], c["lr"], c["heads"], c["init_std"]) == (128, 5e-4, 4, 0.088)
    assert arch_of(c, 64, "qwen2.5-vl").vision_init_std == 0.088
    assert arch_of(parse_config("h128_l4_p8_lr5e-4"), 64, "qwen2.5-vl").vision_init_std is None


def test_pairs_and_codec_give_the_frames_the_target_reads() -> None:
    ends = make_data(4, 3, "easy", 32)
    pairs = make_data(4, 3, "easy", 32, pairs=True)
    coded = make_data(4, 3, "easy", 32, pairs=True, codec=True)
    assert pairs[0].shape == pairs[1].shape == coded[0].shape == (4, 2, 3, 32, 32)
    assert torch.equal(pairs[0][:, 0], ends[0]) and torch.equal(pairs[1][:, 1], ends[1])  # f0 and f[T-1] as before
    assert torch.equal(pairs[2], ends[2])  # the same scenes and labels
    from vidspec.evaluation.synthvid.world import preset

    moving = pairs[2][:, 2] != list(preset("easy").motions).index("still")  # a moving object differs within a pair
    assert bool(moving.any())
    assert any(not torch.equal(pairs[0][i, 0], pairs[0][i, 1]) for i in range(4) if moving[i])
    err = (coded[0].float() - pairs[0].float()).abs().mean()
    assert 0 < err < 10  # H.264 at the world's crf: close to the rendering, not equal


def test_qwen_probe_reads_a_pair_of_equal_frames_as_the_frame_twice() -> None:
    from vision_learnability import arch_of, parse_config

    from vidspec.draft_training.vision_pretrain import QwenTowerProbe

    torch.manual_seed(0)
    probe = QwenTowerProbe(arch_of(parse_config("h32_l1_p8_lr1e-3_n2"), 32, "qwen2.5-vl", 64), (6, 10, 5)).eval()
    first, last = make_data(2, 3, "easy", 32)[:2]
    with torch.no_grad():
        a = probe.encode(first, last).pooler_output
        b = probe.encode(torch.stack([first, first], 1), torch.stack([last, last], 1)).pooler_output
    assert torch.allclose(a, b)
