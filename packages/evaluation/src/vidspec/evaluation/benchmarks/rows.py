"""Row functions: one dataset row in a benchmark's own schema -> the fields of a :class:`Sample`.

Column names follow the datasets as the lmms-eval tasks read them:

- VideoDetailCaption / the video detailed-description set (``video_dc499``): ``video_name``
  (no extension), ``question``, ``answer``.
- MovieChat-1K (test): ``video_name`` (with extension), ``question``, ``answer``, and ``time`` (a
  frame index) for the breakpoint questions.
- Video-MME: ``videoID``, ``question_id``, ``question``, ``options`` (strings ``"A. ..."``),
  ``answer`` (a letter), ``duration`` (short/medium/long), ``domain``, ``sub_category``,
  ``task_type``, ``video_id``.
- MVBench: ``video`` (file name within the sub-task's folder), ``question``, ``candidates``
  (option texts), ``answer`` (the correct option's *text*).
- LongVideoBench: ``id``, ``video_path``, ``question``, ``candidates`` (the json release) or
  ``option0``..``option4`` with ``"N/A"`` for absent options (the parquet release),
  ``correct_choice`` (an index), ``duration``, ``duration_group``, ``question_category``,
  ``subtitle_path``, ``starting_timestamp_for_subtitles``.
- VDC: ``video_name`` (no extension), ``caption`` (the reference), ``qa_list`` (question-answer pairs).
- SynthVid captions: ``video`` (relative to the dataset folder), ``videoID``, ``question``,
  ``answer``, ``facts`` (a JSON string); SynthVid multiple choice: the Video-MME columns plus
  ``video`` and ``facts``.

Each function returns a :class:`MappedRow`; the registry resolves the video file and renders the
prompt. Functions raise :class:`~vidspec.evaluation.benchmarks.types.BenchmarkError` for rows
that are not in their schema.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from vidspec.evaluation.benchmarks.types import BenchmarkError

LETTERS = string.ascii_uppercase
# "A. text", "A) text", "(A) text": the letter prefixes option strings carry in these datasets.
_LETTER_PREFIX = re.compile(r"^\s*\(?([A-Z])[.):]\s*")


@dataclass(frozen=True)
class MappedRow:
    """A row in benchmark-neutral terms, before its video is located.

    Attributes:
        sample_id: unique id within the split.
        video: the video's path as the row names it (relative to a video root, or absolute).
        question: the question without template.
        reference: reference answer (the correct option's text for multiple choice).
        options: option texts without letters.
        answer_letter: letter of the correct option, or ``None``.
        extra: other fields worth keeping in results.
    """

    sample_id: str
    video: str
    question: str
    reference: str
    options: tuple[str, ...] = ()
    answer_letter: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


RowFn = Callable[[Mapping[str, Any], int, str], MappedRow]
"""``(row, index, source) -> MappedRow``; ``source`` names where the row came from (a split or a
file stem, e.g. an MVBench sub-task)."""


def _get(row: Mapping[str, Any], column: str, index: int) -> Any:
    if column not in row or row[column] is None:
        raise BenchmarkError(f"row {index} has no {column!r} column (columns: {sorted(row)})")
    return row[column]


def _text(row: Mapping[str, Any], column: str, index: int) -> str:
    return str(_get(row, column, index)).strip()


def _keep(row: Mapping[str, Any], *columns: str) -> dict[str, Any]:
    return {c: row[c] for c in columns if c in row and row[c] is not None}


def _with_suffix(name: str, suffix: str = ".mp4") -> str:
    # VideoDetailCaption and Video-MME name videos without extension; MovieChat with one.
    return name if PurePath(name).suffix else name + suffix


def split_lettered_options(options: Sequence[str], index: int) -> tuple[str, ...]:
    """Option texts from strings that may start with their letter (``"B. a red ball"``).

    Raises:
        BenchmarkError: prefixed letters are not A, B, C... in order.
    """
    texts = []
    for i, option in enumerate(options):
        m = _LETTER_PREFIX.match(str(option))
        if m:
            if m.group(1) != LETTERS[i]:
                raise BenchmarkError(f"row {index}: option {i} is lettered {m.group(1)!r}, expected {LETTERS[i]!r}")
            texts.append(str(option)[m.end() :].strip())
        else:
            texts.append(str(option).strip())
    return tuple(texts)


def _letter(value: Any, options: tuple[str, ...], index: int) -> str:
    letter = str(value).strip().upper().rstrip(".)")
    letter = letter.lstrip("(")
    if len(letter) != 1 or letter not in LETTERS[: len(options)]:
        raise BenchmarkError(f"row {index}: answer {value!r} is not one of the letters A-{LETTERS[len(options) - 1]}")
    return letter


def _mcq_options(row: Mapping[str, Any], index: int) -> tuple[str, ...]:
    options = _get(row, "options", index)
    if isinstance(options, str):  # some exports store the list as JSON text
        options = json.loads(options)
    options = split_lettered_options(list(options), index)
    if len(options) < 2:
        raise BenchmarkError(f"row {index}: a multiple-choice question needs at least 2 options, got {len(options)}")
    return options


def detail_caption_row(row: Mapping[str, Any], index: int, source: str) -> MappedRow:
    """VideoDetailCaption and the video detailed-description set (same schema)."""
    name = _text(row, "video_name", index)
    return MappedRow(
        sample_id=name,
        video=_with_suffix(name),
        question=_text(row, "question", index),
        reference=_text(row, "answer", index),
        extra=_keep(row, "video_name"),
    )


def moviechat_row(row: Mapping[str, Any], index: int, source: str) -> MappedRow:
    """MovieChat-1K: several questions per movie, so the id carries the row index.

    A breakpoint question (``time``: a frame index) is answered over the movie up to that frame
    (``extra["clip"]``, read by :mod:`~vidspec.evaluation.benchmarks.clips`); its ``mode`` is
    ``breakpoint``, the others' ``global`` (the two lmms-eval tasks).
    """
    name = _text(row, "video_name", index)
    extra = _keep(row, "video_name", "time")
    if row.get("time") is not None:
        try:
            extra["clip"] = {"end_frame": int(row["time"])}
        except (TypeError, ValueError):
            raise BenchmarkError(f"row {index}: time {row['time']!r} is not a frame index") from None
    extra["mode"] = "breakpoint" if "clip" in extra else "global"
    return MappedRow(
        sample_id=f"{PurePath(name).stem}#{index}",
        video=_with_suffix(name),
        question=_text(row, "question", index),
        reference=_text(row, "answer", index),
        extra=extra,
    )


def videomme_row(row: Mapping[str, Any], index: int, source: str) -> MappedRow:
    """Video-MME: lettered options, the answer as a letter."""
    video_id = _text(row, "videoID", index)
    options = _mcq_options(row, index)
    letter = _letter(_get(row, "answer", index), options, index)
    return MappedRow(
        sample_id=str(row.get("question_id") or f"{video_id}#{index}"),
        video=_with_suffix(video_id),
        question=_text(row, "question", index),
        reference=options[LETTERS.index(letter)],
        options=options,
        answer_letter=letter,
        extra=_keep(row, "videoID", "video_id", "duration", "domain", "sub_category", "task_type"),
    )


#: Where MVBench's video archive keeps each sub-task's clips (under its ``video/`` folder).
MVBENCH_VIDEO_FOLDERS: dict[str, str] = {
    "action_antonym": "ssv2_video_mp4",
    "action_count": "perception/videos",
    "action_localization": "sta/sta_video_segment",
    "action_prediction": "star/Charades_segment",
    "action_sequence": "star/Charades_segment",
    "character_order": "perception/videos",
    "counterfactual_inference": "clevrer/video_validation",
    "egocentric_navigation": "vlnqa",
    "episodic_reasoning": "tvqa/video_fps3_hq_segment",
    "fine_grained_action": "Moments_in_Time_Raw/videos",
    "fine_grained_pose": "nturgbd_convert",
    "moving_attribute": "clevrer/video_validation",
    "moving_count": "clevrer/video_validation",
    "moving_direction": "clevrer/video_validation",
    "object_existence": "clevrer/video_validation",
    "object_interaction": "star/Charades_segment",
    "object_shuffle": "perception/videos",
    "scene_transition": "scene_qa/video",
    "state_change": "perception/videos",
    "unexpected_action": "FunQA_test/test",
}


def mvbench_row(row: Mapping[str, Any], index: int, source: str) -> MappedRow:
    """MVBench: the answer is the correct candidate's text; its position gives the letter.

    ``source`` is the sub-task (the annotation file's stem, or the hub configuration); its clips
    sit in the folder :data:`MVBENCH_VIDEO_FOLDERS` names.
    """
    video = _text(row, "video", index)
    folder = MVBENCH_VIDEO_FOLDERS.get(source)
    candidates = tuple(str(c).strip() for c in _get(row, "candidates", index))
    answer = _text(row, "answer", index)
    if answer not in candidates:
        raise BenchmarkError(f"row {index}: answer {answer!r} is not among the candidates {list(candidates)}")
    letter = LETTERS[candidates.index(answer)]
    return MappedRow(
        sample_id=f"{source}#{index}",
        video=f"{folder}/{video}" if folder else video,
        question=_text(row, "question", index),
        reference=answer,
        options=candidates,
        answer_letter=letter,
        extra={"sub_task": source, **_keep(row, "video"), **_segment(row, index)},
    )


def _segment(row: Mapping[str, Any], index: int) -> dict[str, Any]:
    """MVBench's ``start`` / ``end`` (seconds) as a sample clip range, when the row has them."""
    if row.get("start") is None and row.get("end") is None:
        return {}
    try:
        clip = {k: float(row[c]) for k, c in (("start_s", "start"), ("end_s", "end")) if row.get(c) is not None}
    except (TypeError, ValueError):
        raise BenchmarkError(f"row {index}: start/end {row.get('start')!r}/{row.get('end')!r} are not seconds") from None
    return {"clip": clip}


def longvideobench_row(row: Mapping[str, Any], index: int, source: str) -> MappedRow:
    """LongVideoBench: ``candidates`` or ``option0..4`` (``"N/A"`` = absent); ``correct_choice`` index."""
    if row.get("candidates") is not None:
        options = tuple(str(c).strip() for c in row["candidates"])
    else:
        options = tuple(
            str(row[f"option{i}"]).strip()
            for i in range(len(LETTERS))
            if row.get(f"option{i}") not in (None, "N/A")
        )
    if len(options) < 2:
        raise BenchmarkError(f"row {index}: fewer than 2 options in 'candidates' / 'option0'..")
    choice = _get(row, "correct_choice", index)
    if not isinstance(choice, int) or not 0 <= choice < len(options):
        raise BenchmarkError(f"row {index}: correct_choice {choice!r} is not an index into {len(options)} options")
    return MappedRow(
        sample_id=str(row.get("id") or f"{source}#{index}"),
        video=_text(row, "video_path", index),
        question=_text(row, "question", index),
        reference=options[choice],
        options=options,
        answer_letter=LETTERS[choice],
        extra=_keep(
            row, "duration", "duration_group", "question_category", "subtitle_path",
            "starting_timestamp_for_subtitles",
        ),
    )


def _facts(row: Mapping[str, Any], index: int) -> dict[str, Any]:
    facts = _get(row, "facts", index)
    if isinstance(facts, str):
        try:
            facts = json.loads(facts)
        except json.JSONDecodeError as e:
            raise BenchmarkError(f"row {index}: 'facts' is not valid JSON ({e})") from None
    if not isinstance(facts, dict):
        raise BenchmarkError(f"row {index}: 'facts' must be a JSON object")
    return facts


def synthvid_caption_row(row: Mapping[str, Any], index: int, source: str) -> MappedRow:
    """SynthVid captions: VideoDetailCaption-like, plus the ground-truth ``facts``."""
    video_id = str(row.get("videoID") or PurePath(_text(row, "video", index)).stem)
    return MappedRow(
        # A video may have several caption rows (different wording), so the id carries the index.
        sample_id=f"{video_id}#{index}",
        video=_text(row, "video", index),
        question=_text(row, "question", index),
        reference=_text(row, "answer", index),
        extra={"facts": _facts(row, index), **_keep(row, "videoID", "style", "scene_id")},
    )


def synthvid_mcq_row(row: Mapping[str, Any], index: int, source: str) -> MappedRow:
    """SynthVid multiple choice: Video-MME's columns with the video path and ``facts``."""
    options = _mcq_options(row, index)
    letter = _letter(_get(row, "answer", index), options, index)
    video_id = _text(row, "videoID", index)
    return MappedRow(
        sample_id=str(row.get("question_id") or f"{video_id}#{index}"),
        video=_text(row, "video", index),
        question=_text(row, "question", index),
        reference=options[LETTERS.index(letter)],
        options=options,
        answer_letter=letter,
        extra={"facts": _facts(row, index), **_keep(row, "videoID", "task_type", "scene_id")},
    )


def vdc_row(row: Mapping[str, Any], index: int, source: str) -> MappedRow:
    """VDC (lmms-eval's vdc tasks): ``video_name`` (no extension), the reference ``caption`` and ``qa_list``
    (question-answer pairs drawn from it, a list or its JSON text), which VDCscore asks about the prediction."""
    name = _text(row, "video_name", index)
    pairs = _get(row, "qa_list", index)
    if isinstance(pairs, str):
        try:
            pairs = json.loads(pairs)
        except json.JSONDecodeError as e:
            raise BenchmarkError(f"row {index}: 'qa_list' is not valid JSON ({e})") from None
    if not isinstance(pairs, list) or not all(isinstance(p, Mapping) and "question" in p and "answer" in p
                                              for p in pairs):
        raise BenchmarkError(f"row {index}: 'qa_list' must be a list of {{question, answer}} objects")
    return MappedRow(
        sample_id=name,
        video=_with_suffix(name),
        question="",  # the task's prompt is the whole request
        reference=_text(row, "caption", index),
        extra={"video_name": name, "qa_list": [{"question": str(p["question"]), "answer": str(p["answer"])}
                                               for p in pairs]},
    )


#: ``row_fn`` names usable in task YAML files.
ROW_FUNCTIONS: dict[str, RowFn] = {
    "detail_caption": detail_caption_row,
    "moviechat": moviechat_row,
    "videomme": videomme_row,
    "mvbench": mvbench_row,
    "longvideobench": longvideobench_row,
    "vdc": vdc_row,
    "synthvid_caption": synthvid_caption_row,
    "synthvid_mcq": synthvid_mcq_row,
}
