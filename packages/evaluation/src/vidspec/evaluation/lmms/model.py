"""The lmms-eval model ``vidspec``: lmms-eval's tasks decoded with any vidspec method.

lmms-eval builds the prompt (``doc_to_text``), names the video (``doc_to_visual``), post-processes the
output and scores it (``process_results``, ``metric_list``); this class only turns each request into a
:class:`~vidspec.decoding.types.Request` and decodes it with the decoder :func:`build_decoder` assembles
from the model arguments. So a score from ``--model vidspec`` is lmms-eval's score of the method's text,
and for a lossless method (``ar``, ``sd``, ``sparrow``, the tree methods) it equals the target's own.

Model arguments (``--model_args key=value,...``)::

    target        model name or release folder (required)
    method        a vidspec method (default ar; see ``vidspec generate --help``)
    draft         draft VLM of sd / lvspec / fly / tree-sd (default: a tiny target's built-in draft)
    sparrow       Sparrow release folder of the sparrow methods
    k             draft tokens per round (default: the method's)
    engine        eager | fast
    device        cpu | cuda | cuda:N (default: lmms-eval's --device, else cpu)
    dtype         float32 | bfloat16 | float16 (default: the model's)
    max_frames    frames sampled per video (default: the target's)
    compare_ar    true: decode every request with AR too and record token identity and the speedup
    records       JSONL file for the per-sample records (default vidspec_records.jsonl in the working
                  directory; appended to, one line per request)
    any other DecodeConfig field (lam, scorer, tree_total, fast_max_len, ...)

The record of each request (:func:`~vidspec.evaluation.lmms.records.request_record`) carries the task, split and doc id lmms-eval gives it,
the method's tau, target passes, drafted and accepted tokens, video / prefill / decode / wall seconds, and
with ``compare_ar`` the AR wall seconds, the end-to-end speedup and whether the token ids equal AR's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch
from lmms_eval.api.instance import Instance
from lmms_eval.api.model import lmms
from tqdm import tqdm

from vidspec.decoding.config import DecodeConfig
from vidspec.decoding.errors import ConfigError
from vidspec.decoding.methods import build_decoder, get_method
from vidspec.decoding.types import GenerationResult, Request
from vidspec.evaluation.lmms.records import request_record, truncate_at_stops

#: Extensions read as videos; any other visual (an image, audio) is refused with a clear error.
VIDEO_EXTENSIONS = (".mp4", ".mkv", ".avi", ".mov", ".webm", ".m4v", ".mpg", ".mpeg")
#: Token budget when a task's generation_kwargs name none (lmms-eval's own default for video tasks).
DEFAULT_MAX_NEW_TOKENS = 128


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class VidspecLMM(lmms):
    """lmms-eval's ``vidspec`` model: one vidspec decoder (and, with ``compare_ar``, an AR decoder beside it).

    Requests run one at a time (speculative decoding is a batch-1 method); ``batch_size`` is accepted and
    ignored. A MovieChat breakpoint request (a ``{"video_path", "timestep"}`` visual) is answered over the
    video up to that frame.
    """

    is_simple = True

    def __init__(self, target: str, method: str = "ar", draft: str | None = None, sparrow: str | None = None,
                 k: int | None = None, engine: str = "eager", device: str | None = None, dtype: str | None = None,
                 max_frames: int | None = None, compare_ar: bool = False, records: str = "vidspec_records.jsonl",
                 batch_size: Any = 1, max_batch_size: Any = None, **options: Any) -> None:
        super().__init__()
        spec = get_method(method)
        if spec.drafter == "sparrow" and sparrow is None:
            raise ConfigError(f"method {method} needs sparrow=<Sparrow release folder> in --model_args")
        unknown = sorted(set(options) - set(DecodeConfig.field_names()))
        if unknown:
            raise ConfigError(f"unknown vidspec model argument(s) {', '.join(unknown)}")
        self.method = method
        self.target_name = str(target)
        self.device_name = device or "cpu"
        config = DecodeConfig(engine=engine, k=int(k) if k is not None else None, **options)
        self.decoder = build_decoder(method, target=str(target), draft=sparrow if spec.drafter == "sparrow" else draft,
                                     config=config, device=self.device_name, dtype=dtype,
                                     max_frames=int(max_frames) if max_frames is not None else None)
        self.k = getattr(self.decoder, "k", None) or getattr(self.decoder, "depth", 0) or 0
        # AR over the same loaded (or wrapped) target: requests run one after another, so one target serves both.
        self.ar_decoder = (build_decoder("ar", target=self.decoder.target, config=config)
                           if compare_ar and method != "ar" else None)
        self.compare_ar = bool(compare_ar)
        self.records_path = Path(records)
        self.records_path.parent.mkdir(parents=True, exist_ok=True)

    # ---- lmms-eval's interface -------------------------------------------------------------------

    def loglikelihood(self, requests: list[Instance]) -> list[tuple[float, bool]]:
        raise NotImplementedError("the vidspec model generates text; loglikelihood tasks are not supported")

    def generate_until_multi_round(self, requests) -> list[str]:
        raise NotImplementedError("the vidspec model answers single-round tasks; multi-round is not supported")

    def generate_until(self, requests: list[Instance]) -> list[str]:
        """Decode each request with the configured method; lmms-eval scores the returned texts."""
        out: list[str] = []
        with self.records_path.open("a", encoding="utf-8") as sink:
            for req in tqdm(requests, desc=f"vidspec {self.method}", disable=self.rank != 0):
                context, gen_kwargs, doc_to_visual, doc_id, task, split = req.args
                visuals = doc_to_visual(self.task_dict[task][split][doc_id]) or []
                rec = self._decode_one(context, dict(gen_kwargs or {}), visuals, task, split, doc_id)
                sink.write(json.dumps(rec) + "\n")
                sink.flush()
                out.append(rec["text"])
        return out

    # ---- one request -----------------------------------------------------------------------------

    def _video(self, visuals: list[Any]) -> tuple[str, int | None] | None:
        """The request's video file and breakpoint frame (the first visual), or None for a text-only request.

        A visual is a video path, or a ``{"video_path", "timestep"}`` dict (MovieChat's breakpoint tasks: the
        question is about the video up to that frame).
        """
        videos: list[tuple[str, int | None]] = []
        for v in visuals:
            if isinstance(v, (str, Path)) and str(v).lower().endswith(VIDEO_EXTENSIONS):
                videos.append((str(v), None))
            elif isinstance(v, dict) and "video_path" in v:
                videos.append((str(v["video_path"]), int(v["timestep"]) if v.get("timestep") is not None else None))
            else:
                raise ValueError(f"the vidspec model reads video files; this task gives {type(v).__name__} visuals")
        return videos[0] if videos else None

    def _read(self, decoder, video: tuple[str, int | None]):
        path, end_frame = video
        if end_frame is None:
            return decoder.target.read_video(path)
        from vidspec.evaluation.benchmarks.clips import read_sample_video
        from vidspec.evaluation.benchmarks.types import Sample

        sample = Sample(sample_id=path, video_path=path, prompt="", reference="", options=(), answer_letter=None,
                        metric="gpt_judge", extra={"clip": {"end_frame": end_frame}})
        return read_sample_video(decoder.target, sample)

    def _run(self, decoder, prompt: str, video: tuple[str, int | None] | None,
             gen: dict[str, Any]) -> tuple[GenerationResult, float, float]:
        device = decoder.target.device
        _sync(device)
        t0 = time.perf_counter()
        clip = self._read(decoder, video) if video else None
        video_s = time.perf_counter() - t0
        temperature = float(gen.get("temperature") or 0.0) if gen.get("do_sample", True) else 0.0
        result = decoder.generate(Request(prompt=prompt, clip=clip),
                                  max_new_tokens=int(gen.get("max_new_tokens") or DEFAULT_MAX_NEW_TOKENS),
                                  temperature=temperature, top_p=float(gen.get("top_p") or 1.0))
        _sync(device)
        return result, video_s, time.perf_counter() - t0

    def _decode_one(self, context: str, gen: dict[str, Any], visuals: list[Any], task: str, split: str,
                    doc_id: int) -> dict[str, Any]:
        # lmms-eval's image placeholder means nothing to a video adapter, which places the video itself.
        prompt = context.replace("<image>", "").replace("<video>", "").strip()
        video = self._video(list(visuals))
        result, video_s, wall_s = self._run(self.decoder, prompt, video, gen)
        ar = None
        if self.compare_ar:
            if self.ar_decoder is None:  # method ar: identical by definition
                ar = dict(token_ids=result.token_ids, wall_s=wall_s)
            else:
                ar_result, _, ar_wall = self._run(self.ar_decoder, prompt, video, gen)
                ar = dict(token_ids=ar_result.token_ids, wall_s=ar_wall)
        text = truncate_at_stops(result.text, gen.get("until"))
        return request_record(task=task, split=split, doc_id=int(doc_id), method=self.method, k=int(self.k),
                              target=self.target_name, result=result, text=text, video_s=video_s, wall_s=wall_s,
                              ar=ar)
