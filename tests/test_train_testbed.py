"""benchmarks/train_testbed_gpu.sh runs end to end at toy size on CPU (SMOKE=1): data, two trainings,
export, figures. Opt-in (about 1.5 minutes on 2 busy cores): pytest -m slow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vidspec.draft_training.callbacks import read_metrics

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_testbed_script_smoke(tmp_path):
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "SMOKE": "1", "OUT": str(tmp_path / "out"), "PY": sys.executable,
           "VIDSPEC": str(bin_dir / "vidspec"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(["bash", str(REPO / "benchmarks" / "train_testbed_gpu.sh")], capture_output=True,
                          text=True, timeout=600, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    fig = json.loads((tmp_path / "out" / "figures.json").read_text())
    assert fig["draft"]["lossless"] is True and fig["mcq"]["questions"] == 2
    lo, hi = fig["mcq"]["accuracy_ci95"]
    assert 0.0 <= lo <= fig["mcq"]["accuracy"] <= hi <= 1.0
    cap = fig["captions"]  # every caption with a false claim is on record, and only those
    assert (cap["precision"] in (None, 1.0)) == (not cap["hallucinated"])
    assert all(h["false_claims"] and h["video"] and h["generated"] for h in cap["hallucinated"])
    assert set(fig["training"]) == {"synthvid-target-gpu", "synthvid-draft-gpu"}
    for name in fig["training"]:
        assert (tmp_path / "out" / "releases" / name / "manifest.json").is_file()


def test_release_script_smoke(tmp_path):
    """benchmarks/train_releases_gpu.sh (the script that trained the releases and the 24-layer GPU
    profile) at toy size: data, vision pretraining, target from the pretrained tower, its MCQ-weighted
    second stage (FINETUNE_STEPS), draft VLM in the background, Sparrow from the fine-tuned target,
    export, figures (about a minute on 2 cores); first with STOP_AFTER=sft, then the rest."""
    bin_dir = Path(sys.executable).parent
    out = tmp_path / "out"
    env = {**os.environ, "SMOKE": "1", "OUT": str(out), "PY": sys.executable, "FINETUNE_STEPS": "2",
           "VIDSPEC": str(bin_dir / "vidspec"), "OMP_NUM_THREADS": "1"}
    # STOP_AFTER=sft (a device call holding the first stage alone): the first stage and the draft VLM, nothing more
    proc = subprocess.run(["bash", str(REPO / "benchmarks" / "train_releases_gpu.sh")], capture_output=True,
                          text=True, timeout=900, env=env | {"STOP_AFTER": "sft"}, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "STOP_AFTER=sft" in proc.stdout and "== figures" not in proc.stdout
    assert (out / "stages" / "synthvid-target-sft" / "manifest.json").is_file()
    assert sorted(p.name for p in (out / "releases").iterdir()) == ["synthvid-draft"]
    # the same command without it goes on from there
    proc = subprocess.run(["bash", str(REPO / "benchmarks" / "train_releases_gpu.sh")], capture_output=True,
                          text=True, timeout=900, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "train synthvid-target-sft: skipped" in proc.stdout and "train synthvid-draft: skipped" in proc.stdout
    assert (out / "vision" / "tower.safetensors").is_file()
    # The first stage lands in stages/, trained from the pretrained tower, and is not a release.
    sft = json.loads((out / "stages" / "synthvid-target-sft" / "manifest.json").read_text())
    init = sft["training_config"]["model"]["init_args"]
    assert init["vision_init"] == str(out / "vision") and init["freeze_vision"] is True
    assert sorted(p.name for p in (out / "releases").iterdir()) == ["sparrow-synthvid", "synthvid-draft",
                                                                     "synthvid-target"]
    # The release is the second stage: started from the first, MCQ-weighted, at the fine-tune's LR, two steps.
    manifest = json.loads((out / "releases" / "synthvid-target" / "manifest.json").read_text())
    ft = manifest["training_config"]
    assert ft["model"]["init_args"]["init_from"] == str(out / "stages" / "synthvid-target-sft")
    assert ft["data"]["tables"] == ["mcq", "mcq", "."] and ft["data"]["batch_size"] == 4
    assert ft["model"]["init_args"]["optim"]["lr"] == 2.0e-4 and ft["trainer"]["max_steps"] == 2
    assert manifest["arch"] == sft["arch"] and manifest["fingerprint"] != sft["fingerprint"]
    sparrow = json.loads((out / "releases" / "sparrow-synthvid" / "manifest.json").read_text())
    # Distilled from the fine-tune (the figures below load it with that target, which refuses another's draft).
    assert sparrow["target_id"] == str(out / "releases" / "synthvid-target")
    fig = json.loads((out / "figures.json").read_text())
    assert fig["draft"]["lossless"] is True and fig["sparrow"]["lossless"] is True
    assert fig["mcq"]["questions"] == 2
    # Resumable by stage: a rerun after the Sparrow release was lost retrains Sparrow only.
    weights = out / "releases" / "synthvid-target" / "model.safetensors"
    before = weights.read_bytes()
    import shutil

    shutil.rmtree(out / "releases" / "sparrow-synthvid")
    proc = subprocess.run(["bash", str(REPO / "benchmarks" / "train_releases_gpu.sh")], capture_output=True,
                          text=True, timeout=900, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "train synthvid-target: skipped" in proc.stdout and "train sparrow-synthvid (" in proc.stdout
    assert weights.read_bytes() == before
    assert (out / "releases" / "sparrow-synthvid" / "manifest.json").is_file()

    # FINETUNE_FROM: the second stage alone, from that run's first stage, in another folder: no tower, no first
    # stage; FINETUNE_MIX=sft: on the first stage's mixture, at its batch and the LR given.
    sft_dir = out / "stages" / "synthvid-target-sft"
    out2 = tmp_path / "out2"
    env2 = env | {"OUT": str(out2), "DATA": str(out / "synthvid"), "FINETUNE_FROM": str(sft_dir),
                  "STOP_AFTER": "finetune", "FINETUNE_MIX": "sft", "FINETUNE_LR": "3.0e-4"}
    for bad, message in (({"FINETUNE_STEPS": "0"}, "FINETUNE_FROM needs FINETUNE_STEPS"),
                         ({"FINETUNE_MIX": "captions"}, "unknown FINETUNE_MIX captions")):
        proc = subprocess.run(["bash", str(REPO / "benchmarks" / "train_releases_gpu.sh")], capture_output=True,
                              text=True, timeout=900, env=env2 | bad, cwd=REPO)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
        assert not out2.exists() or not any(out2.iterdir())  # refused before anything was written
    proc = subprocess.run(["bash", str(REPO / "benchmarks" / "train_releases_gpu.sh")], capture_output=True,
                          text=True, timeout=900, env=env2, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "train synthvid-target-sft: skipped" in proc.stdout and "vision pretraining" not in proc.stdout
    assert not (out2 / "vision").exists() and not (out2 / "stages").exists()
    ft = json.loads((out2 / "releases" / "synthvid-target" / "manifest.json").read_text())["training_config"]
    assert ft["model"]["init_args"]["init_from"] == str(sft_dir) and ft["trainer"]["max_steps"] == 2
    assert ft["data"]["tables"] == [".", "mcq", "openqa"] and ft["data"]["caption_styles"] == ["alpha"]
    assert ft["data"]["batch_size"] == 4 and ft["model"]["init_args"]["optim"]["lr"] == 3.0e-4


def test_release_script_target_over_two_calls(tmp_path):
    """TARGET_CALL_STEPS: the target stage trains its share, pauses (exit 3) and goes on from its checkpoint in the
    next call, with one LR schedule over all of TARGET_STEPS; Sparrow and the figures wait for the full target."""
    import torch

    bin_dir = Path(sys.executable).parent
    out = tmp_path / "out"
    env = {**os.environ, "SMOKE": "1", "PROFILE": "gpu", "OUT": str(out), "PY": sys.executable,
           "VIDSPEC": str(bin_dir / "vidspec"), "OMP_NUM_THREADS": "1", "TARGET_CALL_STEPS": "2"}
    run = lambda: subprocess.run(["bash", str(REPO / "benchmarks" / "train_releases_gpu.sh")],  # noqa: E731
                                 capture_output=True, text=True, timeout=900, env=env, cwd=REPO)
    ckpt = out / "runs" / "synthvid-target" / "checkpoints" / "last.ckpt"
    step = lambda: torch.load(ckpt, map_location="cpu", weights_only=False)["global_step"]  # noqa: E731

    first = run()
    assert first.returncode == 3, first.stdout[-2000:] + first.stderr[-3000:]
    assert "paused at step 2 of 3" in first.stdout and step() == 2
    assert not (out / "releases" / "synthvid-target").exists() and not (out / "releases" / "sparrow-synthvid").exists()

    second = run()
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    assert "steps 2 -> 3 in this call" in second.stdout and step() == 3
    manifest = json.loads((out / "releases" / "synthvid-target" / "manifest.json").read_text())
    assert manifest["training_config"]["model"]["init_args"]["optim"]["total_steps"] == 3
    assert (out / "releases" / "sparrow-synthvid" / "manifest.json").is_file() and (out / "figures.json").is_file()


def test_release_script_qwen_family(tmp_path):
    """FAMILY=qwen2.5-vl: target and draft VLM are Qwen2.5-VL models (issue 4: releases of both families), the
    target starts from a pretrained Qwen tower (with its merger into the target's width, here set by TARGET_EXTRA)
    kept frozen, Sparrow distils from the Qwen target, and the figures are computed; an unknown family is refused
    with exit 2."""
    bin_dir = Path(sys.executable).parent
    out = tmp_path / "out"
    env = {**os.environ, "SMOKE": "1", "FAMILY": "qwen2.5-vl", "OUT": str(out), "PY": sys.executable,
           "VIDSPEC": str(bin_dir / "vidspec"), "OMP_NUM_THREADS": "1", "MCQ_LIMIT": "3", "VAL_EVERY": "2",
           "TARGET_EXTRA": "--model.init_args.arch.hidden_size 32 --model.init_args.arch.num_heads 2 "
                           "--model.init_args.arch.mrope_section [2,2,4] --model.init_args.arch.rope_theta 100"}
    proc = subprocess.run(["bash", str(REPO / "benchmarks" / "train_releases_gpu.sh")], capture_output=True,
                          text=True, timeout=900, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    tower = json.loads((out / "vision" / "tower.json").read_text())["arch"]
    assert tower["family"] == "qwen2.5-vl" and tower["hidden_size"] == 32  # TARGET_EXTRA's width, not SMOKE's 64
    text = json.loads((out / "releases" / "synthvid-target" / "config.json").read_text())["text_config"]
    assert text["hidden_size"] == 32
    # TARGET_EXTRA's bands and base (.gpu/s30c1.sh's), through training and export
    assert text["rope_parameters"]["mrope_section"] == [2, 2, 4] and text["rope_parameters"]["rope_theta"] == 100
    for name in ("synthvid-target", "synthvid-draft"):
        config = json.loads((out / "releases" / name / "config.json").read_text())
        assert config["architectures"] == ["Qwen2_5_VLForConditionalGeneration"], name
        assert config["vision_config"]["patch_size"] == 8
        assert json.loads((out / "releases" / name / "vidspec.json").read_text())["adapter_options"] == {
            "min_pixels": 4096, "max_pixels": 4096}
    draft_arch = json.loads((out / "releases" / "synthvid-draft" / "manifest.json").read_text())["training_config"]
    assert draft_arch["model"]["init_args"]["arch"]["vision_init_std"] == 0.125  # its tower trains from scratch
    init = json.loads((out / "releases" / "synthvid-target" / "manifest.json").read_text())["training_config"]
    assert init["model"]["init_args"]["arch"].get("vision_init_std") is None  # its tower is pretrained
    assert init["model"]["init_args"]["freeze_vision"] is True
    assert init["model"]["init_args"]["vision_init"] == str(out / "vision")
    fig = json.loads((out / "figures.json").read_text())
    # lossless: the draft VLM and Sparrow (which reads the target's M-RoPE bands) give the target's greedy tokens
    assert fig["draft"]["lossless"] is True and fig["sparrow"]["lossless"] is True
    assert fig["captions"]["videos"] == 2 and fig["mcq"]["questions"] == 3  # EVAL_LIMIT captions, MCQ_LIMIT questions
    # VAL_EVERY=2: the target validated at step 2 of its 3, with each question type's letter accuracy
    val = [r for r in read_metrics(out / "runs" / "synthvid-target" / "metrics.jsonl") if "val/loss" in r]
    assert [r["step"] for r in val] == [2] and any(k.startswith("val/mcq_acc/") for k in val[0])

    bad = subprocess.run(["bash", str(REPO / "benchmarks" / "train_releases_gpu.sh")], capture_output=True, text=True,
                         timeout=60, env=env | {"FAMILY": "qwen2"}, cwd=REPO)
    assert bad.returncode == 2 and "unknown FAMILY qwen2" in bad.stderr


def test_wilson_interval():
    sys.path.insert(0, str(REPO / "benchmarks"))
    from train_testbed import wilson

    lo, hi = wilson(59, 60)  # issue 4's MCQ in session 18
    assert round(lo, 3) == 0.911 and round(hi, 3) == 0.997
    assert wilson(0, 0) is None and wilson(20, 20)[1] == 1.0 and abs(wilson(0, 10)[0]) < 1e-12


def test_caption_bootstrap_moves_a_captions_claims_together():
    sys.path.insert(0, str(REPO / "benchmarks"))
    from train_testbed import caption_bootstrap, wilson

    clustered = [[5, 5]] * 18 + [[0, 5]] * 2  # 90 of 100 claims true, every false one in two captions
    b = caption_bootstrap(clustered, draws=2000)
    lo, hi = b["ci95"]
    w_lo, w_hi = wilson(90, 100)
    assert lo < 0.9 < hi and hi - lo > w_hi - w_lo  # wider than Wilson's, which counts the claims as independent
    assert b["units"] == 20 and 0.0 < b["share_at_or_above"]["0.95"] < 1.0
    assert b == caption_bootstrap(clustered, draws=2000)  # seeded
    spread = caption_bootstrap([[5, 5]] * 18 + [[4, 5]] * 10, draws=2000)  # the same kind of errors, one a caption
    assert spread["ci95"][1] - spread["ci95"][0] < hi - lo
    perfect = caption_bootstrap([[3, 3], [0, 0], [2, 2]], draws=200)  # a caption without claims is left out
    assert perfect["ci95"] == [1.0, 1.0] and perfect["units"] == 2 and perfect["share_at_or_above"]["0.98"] == 1.0
    assert caption_bootstrap([[0, 0]]) is None and caption_bootstrap([]) is None


def _fresh_clips(tmp_path, videos: int) -> Path:
    """``videos`` fresh SynthVid validation clips in ``tmp_path/sv``."""
    from vidspec.evaluation.synthvid import SynthVidConfig, generate_synthvid

    return generate_synthvid(tmp_path / "sv", SynthVidConfig(num_videos=videos, seed=3, preset="easy", frames=8,
                                                              size="64x64", split="validation", styles="alpha"),
                             progress=False)


def _script_on_fresh_clips(tmp_path, script: str, *args: str, videos: int = 4) -> subprocess.CompletedProcess:
    """Run ``benchmarks/<script> --data DATA --target <committed target> *args`` on ``videos`` fresh SynthVid
    validation clips, on one CPU thread."""
    data = _fresh_clips(tmp_path, videos)
    return subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), "--data", str(data), "--target",
         str(REPO / "data" / "releases" / "synthvid-target"), *args],
        capture_output=True, text=True, timeout=300, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_figures_take_more_questions_than_captions(tmp_path):
    """--mcq-limit: the MCQ counts its own questions, the captions keep --limit (the committed releases)."""
    proc = _script_on_fresh_clips(tmp_path, "train_testbed.py", "--limit", "1", "--mcq-limit", "3", "--device", "cpu",
                                  "--out", str(tmp_path / "fig.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    fig = json.loads((tmp_path / "fig.json").read_text())
    assert fig["captions"]["videos"] == 1 and fig["mcq"]["questions"] == 3
    per = fig["captions"]["per_caption"]
    assert len(per) == 1 and per[0][1] == fig["captions"]["claims"]
    assert sum(t["questions"] for t in fig["mcq"]["by_type"].values()) == 3
    assert sum(sum(t["answered"].values()) for t in fig["mcq"]["by_type"].values()) == 3
    assert all(set(t["answered"]) <= {"A", "B", "C", "D", "none"} for t in fig["mcq"]["by_type"].values())


def test_mcq_teacher_forced_script(tmp_path):
    """benchmarks/mcq_teacher_forced.py on the committed target: one question type, its letters counted; an unknown
    type is refused with exit 2 and one line."""
    proc = _script_on_fresh_clips(tmp_path, "mcq_teacher_forced.py", "--type", "colour", "--limit", "2",
                                  "--out", str(tmp_path / "tf.json"), videos=6)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fig = json.loads((tmp_path / "tf.json").read_text())
    path = fig["paths"]["batched_positions"]  # LLaVA-OV: one path
    assert fig["family"] == "llava-ov" and list(fig["paths"]) == ["batched_positions"]
    assert path["questions"] == fig["questions"] >= 1 and sum(path["letters"].values()) == path["questions"]
    assert 0.0 <= path["letter_accuracy"] <= 1.0 and path["loss"] > 0
    # the options picked, by the right option's text: as many as questions, the right ones as many as correct
    assert sum(sum(c.values()) for c in path["confusion"].values()) == path["questions"]
    assert sum(c.get(truth, 0) for truth, c in path["confusion"].items()) == path["correct"]
    # by the clip's number of objects: every question once, the right ones as many as correct
    assert sum(c["questions"] for c in path["by_objects"].values()) == path["questions"]
    assert sum(c.get("correct", 0) for c in path["by_objects"].values()) == path["correct"]
    bad = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "mcq_teacher_forced.py"), "--data", str(tmp_path / "sv"),
         "--target", str(REPO / "data" / "releases" / "synthvid-target"), "--type", "hexagon"],
        capture_output=True, text=True, timeout=300, cwd=REPO)
    assert bad.returncode == 2 and "no 'hexagon' questions" in bad.stderr and "Traceback" not in bad.stderr


def test_by_objects_tells_another_objects_answer_from_a_wrong_fact():
    """mcq_teacher_forced.by_objects: a wrong letter that states the other object's motion counts as answered for
    another object; one that states nobody's motion does not; questions are split by the clip's objects."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from mcq_teacher_forced import by_objects

    objs = [{"colour": "red", "shape": "square", "motion": "left"}, {"colour": "blue", "shape": "star", "motion": "up"}]
    two = {"facts": json.dumps({"count": 2, "objects": objs}), "question": "How does the red square move?",
           "options": ["A. Moves up.", "B. Moves left.", "C. Moves down.", "D. Stays still."], "answer": "B"}
    one = {"facts": json.dumps({"count": 1, "objects": objs[:1]}), "question": "How does the red square move?",
           "options": two["options"], "answer": "B"}
    got = by_objects([two, two, two, one, one], ["A", "C", "B", "B", "A"])
    assert got == {"2": {"questions": 3, "another_object": 1, "correct": 1}, "1": {"questions": 2, "correct": 1}}


def test_linear_probe_reads_what_is_there():
    """mcq_teacher_forced.linear_probe: separable classes are read off held-out rows; labels unrelated to the
    features are not (near the majority share)."""
    import torch

    sys.path.insert(0, str(REPO / "benchmarks"))
    from mcq_teacher_forced import linear_probe

    g = torch.Generator().manual_seed(0)
    labels = [["up", "down", "left"][i % 3] for i in range(300)]
    centres = {"up": 0, "down": 1, "left": 2}
    x = torch.randn(300, 16, generator=g)
    for i, c in enumerate(labels):
        x[i, centres[c]] += 4.0
    fit = linear_probe(x, labels)
    assert fit["classes"] == ["down", "left", "up"] and fit["train"] == 210 and fit["test"] == 90
    assert fit["test_accuracy"] > 0.9
    shuffled = [labels[j] for j in torch.randperm(300, generator=g).tolist()]
    assert linear_probe(x, shuffled)["test_accuracy"] < 0.6
    assert "error" in linear_probe(x[:2], labels[:2])


def test_mcq_variants_convert():
    """mcq_variants: a text answer keeps the letter rows' prompt and answers with the right option's text (a
    text-letter answer then names the letter, which the MCQ metric reads); one-word options keep each option's
    distinguishing word."""
    from datasets import Dataset

    sys.path.insert(0, str(REPO / "benchmarks"))
    from mcq_variants import convert

    from vidspec.draft_training.data import MCQ_INSTRUCTION, rows_from_table

    row = {"video": "videos/validation/a.mp4", "task_type": "motion", "question": "How does the red star move?",
           "options": ["A. Moves left.", "B. Stays still.", "C. Grows.", "D. Moves down."], "answer": "D"}
    text = convert(row, "text", "as-is", MCQ_INSTRUCTION)  # the prompt of the letter rows, to compare them
    letter = convert(row, "letter", "as-is", MCQ_INSTRUCTION)
    assert text["answer"] == "Moves down." and "options" not in text
    both = convert(row, "text-letter", "as-is", "Answer with the option's text, then its letter.")
    assert both["answer"] == "Moves down. Answer: D" and both["question"].endswith("then its letter.")
    from vidspec.evaluation.synthvid.mcq import extract_choice

    assert extract_choice(both["answer"], options=row["options"]) == "D"
    assert extract_choice("Moves left. Answer: B", options=row["options"]) == "B"  # the letter counts, not the text
    short = convert(row, "letter", "last-word", MCQ_INSTRUCTION)
    assert short["options"] == ["A. left.", "B. still.", "C. grows.", "D. down."] and short["answer"] == "D"

    as_text, as_letter = (rows_from_table(Dataset.from_list([r]), Path("/d"), None, MCQ_INSTRUCTION)[0]
                          for r in (text, letter))
    assert as_text.prompt == as_letter.prompt and as_text.answer == "Moves down." and as_letter.answer == "D"
    assert as_letter.kind == "motion" and as_text.kind == ""  # a text answer is not counted as a letter


def test_mcq_teacher_forced_letter_index():
    """mcq_teacher_forced: a text-then-letter answer's letter is found after its colon, not in the text."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from mcq_teacher_forced import letter_index

    assert letter_index(["Moves", " up", ".", " Answer", ":", " D", "<|im_end|>"]) == 5
    assert letter_index(["A", " circle", "."]) is None  # a capital letter with no colon before it is no answer
    assert letter_index(["Moves", " up", "."]) is None
    from mcq_teacher_forced import confusion, option_texts

    row = {"question": "How does it move?\nA. Moves left.\nB. Grows.\nC. Moves up.\nD. Stays still.\nAnswer with the "
                       "option's text, then its letter.", "answer": "Moves up. Answer: C"}
    assert option_texts(row) == {"A": "Moves left.", "B": "Grows.", "C": "Moves up.", "D": "Stays still."}
    assert confusion([row, row], ["C", "A"]) == {"Moves up.": {"Moves up.": 1, "Moves left.": 1}}


def test_mcq_variants_script_and_text_table(tmp_path):
    """benchmarks/mcq_variants.py writes a text-answer table that mcq_teacher_forced.py --table reads (its
    answer_accuracy counts whole answers); a type with no questions is refused with exit 2."""
    from datasets import load_from_disk

    data = Path(_fresh_clips(tmp_path, 6))
    run = [sys.executable, str(REPO / "benchmarks" / "mcq_variants.py"), "--data", str(data), "--out",
           str(tmp_path / "v")]
    ok = subprocess.run(run + ["--type", "colour", "--answer", "text"], capture_output=True, text=True, timeout=120,
                        cwd=REPO)
    assert ok.returncode == 0, ok.stderr[-2000:]
    table = load_from_disk(str(tmp_path / "v" / "mcqtext"))["validation"]
    source = load_from_disk(str(data / "mcq"))["validation"].filter(lambda r: r["task_type"] == "colour")
    assert len(table) == len(source) >= 1
    first = source[0]
    assert table[0]["answer"] == first["options"]["ABCD".index(first["answer"])].split(". ", 1)[1]
    tf = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "mcq_teacher_forced.py"), "--data", str(tmp_path / "v"),
         "--table", "mcqtext", "--video-root", str(data), "--target", str(REPO / "data" / "releases" / "synthvid-target"),
         "--type", "colour", "--out", str(tmp_path / "tf.json")],
        capture_output=True, text=True, timeout=300, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert tf.returncode == 0, tf.stderr[-3000:]
    path = json.loads((tmp_path / "tf.json").read_text())["paths"]["batched_positions"]
    assert path["questions"] == len(table) and 0.0 <= path["answer_accuracy"] <= path["letter_accuracy"] <= 1.0
    bad = subprocess.run(run + ["--type", "hexagon"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert bad.returncode == 2 and "no 'hexagon' questions" in bad.stderr and "Traceback" not in bad.stderr
