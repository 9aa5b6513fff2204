"""benchmarks/qwen_mrope_motion.py: a Qwen2.5-VL tower's video tokens, then the M-RoPE configurations side by side."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "qwen_mrope_motion.py"


def _qwen_release(tmp_path: Path, data: Path) -> Path:
    """An untrained tiny Qwen2.5-VL saved as a release folder (the script uses its tower and merger only)."""
    from vidspec.draft_training.arch import ArchConfig
    from vidspec.draft_training.export import write_release_options
    from vidspec.draft_training.sft import VLMSFTModule
    from vidspec.draft_training.testing import ARCH, QWEN_OPTIONS

    module = VLMSFTModule(tokenizer=str(data / "tokenizer"), arch=ArchConfig(**ARCH["qwen2.5-vl"]), max_frames=8,
                          adapter_options=QWEN_OPTIONS)
    out = tmp_path / "qwen"
    module.model.save_pretrained(str(out))
    module.tokenizer.save_pretrained(str(out))
    write_release_options(out, QWEN_OPTIONS, 8)
    return out


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300,
                          cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_mrope_motion_script(tmp_path):
    from vidspec.evaluation.synthvid import SynthVidConfig, generate_synthvid

    data = generate_synthvid(tmp_path / "sv", SynthVidConfig(num_videos=10, seed=3, preset="easy", frames=8,
                                                             size="64x64", split="validation", styles="alpha"),
                             progress=False)
    tower = _qwen_release(tmp_path, data)
    out = tmp_path / "m.json"
    proc = _run("--data", str(data), "--tower", str(tower), "--train-split", "validation", "--test-split",
                "validation", "--configs", "s4-2-2_b10000,1d_b10000", "--hidden", "32", "--heads", "2",
                "--steps", "4", "--every", "2", "--batch", "4", "--gap", "3", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rep = json.loads(out.read_text())
    t, h, w = rep["grid_t_h_w"]
    assert t == 4 and h == w  # 8 frames in temporal patches of 2; a square frame
    assert 1 <= rep["test_videos"] <= 10 and 0 < rep["chance"] <= 1
    a, b = rep["results"]
    assert a["sections"] == [4, 2, 2] and b["sections"] is None  # 1-D positions use no bands
    assert [c["step"] for c in a["curve"]] == [2, 4] and all(0 <= c["accuracy"] <= 1 for c in a["curve"])
    assert rep["args"]["gap"] == 3
    # bad input: one line, exit 2
    bad = _run("--data", str(data), "--tower", str(tower), "--configs", "s4-2_b10")
    assert bad.returncode == 2 and "bad configuration 's4-2_b10'" in bad.stderr and "Traceback" not in bad.stderr
    missing = _run("--data", str(data), "--tower", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "no model at --tower" in missing.stderr


def test_positions_follow_get_rope_index():
    """The benchmark's video and text positions are the ones transformers' ``get_rope_index`` gives a video (one
    temporal step per temporal patch, text after the video one past the largest), from the vision-start token on."""
    import importlib.util

    import torch
    from transformers import Qwen2_5_VLConfig
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel

    spec = importlib.util.spec_from_file_location("qwen_mrope_motion", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cfg = Qwen2_5_VLConfig(text_config={"hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 2,
                                        "num_hidden_layers": 1, "intermediate_size": 64, "vocab_size": 64,
                                        "rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                                                            "mrope_section": [4, 2, 2]}},
                           vision_config={"depth": 1, "hidden_size": 16, "out_hidden_size": 32, "num_heads": 2,
                                          "patch_size": 14, "tokens_per_second": 2},
                           vision_start_token_id=60, video_token_id=61, image_token_id=62)
    model = Qwen2_5_VLModel(cfg)
    grid, gap = (4, 2, 2), 3  # merged tokens; the raw grid is (4, 4, 4) with the 2 x 2 merge
    n_vid = 16
    ids = torch.tensor([[60] + [61] * n_vid + [5] * (gap + 1)])
    types = torch.tensor([[0] + [2] * n_vid + [0] * (gap + 1)], dtype=torch.int32)
    kwargs = {"mm_token_type_ids": types} if "mm_token_type_ids" in model.get_rope_index.__code__.co_varnames else {}
    hf, _ = model.get_rope_index(ids, video_grid_thw=torch.tensor([[4, 4, 4]]),
                                 second_per_grid_ts=torch.tensor([0.5]), attention_mask=torch.ones_like(ids), **kwargs)
    ours = mod.positions(grid, [4, 2, 2], 1, gap)
    assert torch.equal(hf[-3:], ours)
