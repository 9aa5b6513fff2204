"""SynthVid: a procedural video world with exact ground truth (docs/evaluation.md).

Modules: :mod:`.world` (scenes, presets), :mod:`.render` (numpy frames, H.264 mp4),
:mod:`.grammar` (captions, styles, word labels), :mod:`.questions` (Video-MME-style MCQ, open QA),
:mod:`.tokenizer` (the SynthVid tokenizer, per-token labels), :mod:`.dataset` (the dataset on
disk), :mod:`.judge` (fact judge), :mod:`.mcq` (letter extraction, accuracy).

Heavy imports (datasets, transformers, av) happen inside the functions that need them.
"""

from vidspec.evaluation.synthvid.dataset import (
    SynthVidConfig,
    generate_synthvid,
    is_synthvid_dataset,
    load_synthvid,
)
from vidspec.evaluation.synthvid.grammar import STYLES, Caption, CaptionStyle, greedy_caption, sample_caption
from vidspec.evaluation.synthvid.judge import JudgeResult, judge_caption
from vidspec.evaluation.synthvid.mcq import MCQAccuracy, extract_choice, mcq_accuracy
from vidspec.evaluation.synthvid.tokenizer import build_tokenizer, load_tokenizer, token_labels, visual_mask
from vidspec.evaluation.synthvid.world import PRESETS, Scene, WorldConfig, sample_scene

__all__ = [
    "PRESETS", "STYLES", "Caption", "CaptionStyle", "JudgeResult", "MCQAccuracy", "Scene", "SynthVidConfig",
    "WorldConfig", "build_tokenizer", "extract_choice", "generate_synthvid", "greedy_caption", "is_synthvid_dataset",
    "judge_caption", "load_synthvid", "load_tokenizer", "mcq_accuracy", "sample_caption", "sample_scene",
    "token_labels", "visual_mask",
]
