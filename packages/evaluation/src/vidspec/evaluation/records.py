"""What an evaluation run writes, and the append-only JSONL log that makes it resumable.

One run folder (``vidspec eval --out DIR``) holds::

    DIR/config.json        the resolved EvalConfig (a rerun must match it to resume)
    DIR/records.jsonl      one SampleRecord per (sample, method), written as each decode ends
    DIR/judgements.jsonl   one JudgementRecord per (sample, method) when --judge is given
    DIR/judge_cache.jsonl  the GPT judge's verdict cache (never asks the same thing twice)
    DIR/summary.json       RunSummary: config, git SHA, versions, machine, per-method aggregates

Metric conventions (docs/algorithms.md, Metrics), stated in every summary and report as
:data:`CONVENTIONS`:

- τ = tokens emitted per target verification pass, bonus token included (AR = 1.0); a method's τ
  is the mean of its per-sample τ.
- DSR (decode speedup) = AR decode seconds per decoded token / the method's, where decoded tokens
  exclude the first token (it comes from prefill) and decode time excludes prefill and video.
- A drafter's ``prepare`` (its prompt-side start: a Sparrow draft's prompt feed, a draft VLM's own
  prefill) runs in the prefill phase. ``dsr_prepare_in_decode`` counts its host seconds in the
  method's decode time instead: the conservative DSR, the one the headline bars are judged on.
- ESR (end-to-end speedup) = AR wall seconds per emitted token / the method's, wall time covering
  video reading, prefill and decoding.
- Per sample both are against the same sample's AR run; per method they are ratios of totals
  over the samples both have (a long sample weighs more than a short one).
- Retention = mean method score / mean AR score on the same samples; the score is the MCQ
  correctness (0/1), the SynthVid fact F1 (harmonic mean of fact precision and recall), or the
  GPT judge's 0-5 score for open-ended benchmarks.
- Batch 1, greedy, warm-up excluded, CUDA synchronised around timers, AR measured in the same
  process on the same hardware (a resumed run measures the rest in its own process).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import statistics
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from vidspec.decoding.errors import ConfigError

log = logging.getLogger(__name__)

#: Bumped when a field changes meaning; readers refuse records of another version.
SCHEMA_VERSION = 1

CONVENTIONS = (
    "τ = tokens per target pass incl. the bonus token (AR = 1.0), mean over samples. "
    "DSR = AR decode s/token ÷ method decode s/token (prefill and video excluded; the first token, "
    "from prefill, not counted); dsr_prepare_in_decode counts the drafter's prompt-side prepare (run in "
    "the prefill phase) in the decode instead. ESR = AR wall s/token ÷ method wall s/token (video reading, prefill "
    "and decode included). Per method both are ratios of totals over samples with an AR run. "
    "Retention = method score ÷ AR score on the same samples (MCQ accuracy; SynthVid fact F1; "
    "GPT-judge 0-5 score when judged). Batch 1, greedy, warm-up excluded, CUDA synchronised "
    "around timers, AR in the same process and hardware."
)


class SampleRecord(TypedDict):
    """One method's output on one sample (a line of ``records.jsonl``).

    Times are seconds. ``dsr``/``esr`` are against the same sample's AR run (1.0 for AR itself;
    None when a side decoded no token after the first). Fidelity fields that do not apply to the
    sample's metric are None.

    Where decode time goes (fields added later; records written before them lack them):
    ``begin_s`` is the part of ``decode_s`` spent in the drafter's ``begin``; ``draft_prefill_s`` the
    part of ``prefill_s`` spent in its ``prepare`` (the prompt feed, since 2026-12-01; before, it was
    in ``begin``),
    ``draft_ms_per_round``/``verify_ms_per_round`` the mean milliseconds per round of ``propose``
    and of verification (target pass, decision, rollback, commit), None without rounds; the rest of
    ``decode_s`` is the engine's own per-round bookkeeping. ``drafter`` is the drafter's class.
    ``load_s``/``warmup_s``: the process's one-time costs, loading the models and building the decoders,
    and this method's untimed warm-up (the decoder's own ``warmup``: a decode, CUDA graph capture); the same in
    every record of a run. ``k_history``/``drafting_stopped_at`` (chain methods with the adaptive draft
    policy): ``[tokens emitted, K from then on]`` pairs and the token count at which drafting stopped (None
    if it did not), as ``vidspec generate --json`` shows them; a tree method that stops drafting records the
    same with its depth. ``loose_stopped_at``/``loose_rounds``/``loose_helped_rounds`` (loose methods with the
    policy): tokens emitted when the loose rule was switched off for the rest of the request (None if never),
    drafting rounds with the rule on, and those where it accepted a token (``LooseSwitch``).
    ``rounds`` (since 2026-12-02): ``[drafted, accepted, emitted]`` of each target pass in order, so
    which token a round's draft missed can be located: the first token comes from the prefill, round
    ``j`` emits the ``emitted`` tokens after those of the rounds before it, and in a chain method's
    round with ``accepted < drafted`` the token after the accepted ones is the target's own, where the
    draft proposed another (a tree method drafts more nodes than a round can accept).
    """

    schema: int
    benchmark: str
    sample_id: str
    method: str
    k: int
    text: str
    token_ids: list[int]
    num_new_tokens: int
    finish_reason: str
    tau: float
    target_passes: int
    drafted: int
    accepted: int
    acceptance_by_position: list[float]
    loose_accepted: int
    shift_accepted: int
    video_s: float
    prefill_s: float
    decode_s: float
    wall_s: float
    dsr: float | None
    esr: float | None
    token_identical_to_ar: bool
    metric: str
    score: float | None
    correct: bool | None
    choice: str | None
    fact_precision: float | None
    fact_recall: float | None
    fact_hallucinations: int | None
    hallucinated: list[str]
    begin_s: NotRequired[float]
    draft_prefill_s: NotRequired[float]
    draft_ms_per_round: NotRequired[float | None]
    verify_ms_per_round: NotRequired[float | None]
    drafter: NotRequired[str]
    rounds: NotRequired[list[list[int]]]
    scorer: NotRequired[str]
    categories: NotRequired[dict[str, str]]
    load_s: NotRequired[float]
    warmup_s: NotRequired[float]
    k_history: NotRequired[list[list[int]]]
    drafting_stopped_at: NotRequired[int | None]
    loose_stopped_at: NotRequired[int | None]
    loose_rounds: NotRequired[int]
    loose_helped_rounds: NotRequired[int]


class JudgementRecord(TypedDict):
    """The GPT judge's verdict on one record (a line of ``judgements.jsonl``)."""

    schema: int
    sample_id: str
    method: str
    judge_score: float | None
    judge_status: str
    judge_model: str
    judge_reply: str
    judge_protocol: NotRequired[str]
    judge_prompt_version: NotRequired[str]
    judge_correct: NotRequired[bool | None]
    judge_acc: NotRequired[float]


class MethodSummary(TypedDict):
    """Aggregates of one method over a run (see :data:`CONVENTIONS`)."""

    method: str
    n_samples: int
    n_with_ar: int
    tau: float
    tau_min: float
    tau_max: float
    acceptance_by_position: list[float]
    dsr: float | None
    dsr_prepare_in_decode: NotRequired[float | None]
    esr: float | None
    tokens_per_s: float | None
    mean_new_tokens: float
    token_identical_share: float | None
    score: float | None
    ar_score: float | None
    retention: float | None
    accuracy: float | None
    fact_precision: float | None
    fact_recall: float | None
    hallucinations_per_sample: float | None
    judge_score: float | None
    judge_unparsable: int
    judge_accuracy: NotRequired[float | None]
    loose_accepted: int
    shift_accepted: int
    begin_ms: NotRequired[float | None]
    draft_prefill_ms: NotRequired[float | None]
    prefill_ms: NotRequired[float | None]
    prefill_vs_ar_ms_median: NotRequired[float | None]
    draft_ms_per_round: NotRequired[float | None]
    verify_ms_per_round: NotRequired[float | None]
    drafter: NotRequired[str | None]


class RunSummary(TypedDict):
    """``summary.json``: what was run, where, with which code, and the per-method aggregates."""

    schema: int
    conventions: str
    benchmark: str
    config: dict[str, Any]
    git: dict[str, Any]
    versions: dict[str, str]
    machine: dict[str, Any]
    n_samples: int
    methods: dict[str, MethodSummary]


# ---- the append-only log ---------------------------------------------------------------------


class JsonlLog:
    """An append-only JSONL file keyed by ``(sample_id, method)``, safe against being killed.

    Every record is written as one line, flushed and fsynced before :meth:`append` returns, so a
    record either is on disk whole or is the partial last line of a killed run. Opening the file
    drops such a partial last line (the file is truncated to the last newline, so the next append
    starts on a fresh line) and skips any other line that does not parse.

    Args:
        path: the JSONL file (created with its folder when missing).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.records: dict[tuple[str, str], dict] = {}
        self.dropped_partial = False
        self._load()
        self._fh = open(self.path, "ab")  # noqa: SIM115 - held open for the run's appends

    def _load(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            # The tail after the last newline is a record cut off by a kill: it was never
            # acknowledged, so its sample x method is simply done again.
            log.warning("%s: dropping a partially written last line (%d bytes)", self.path, len(data) - end)
            with open(self.path, "r+b") as fh:
                fh.truncate(end)
                fh.flush()
                os.fsync(fh.fileno())
            self.dropped_partial = True
        for n, line in enumerate(data[:end].splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                log.warning("%s: line %d is not JSON; skipped", self.path, n)
                continue
            _check_schema(self.path, n, rec)
            self.records.setdefault((rec["sample_id"], rec["method"]), rec)

    def __contains__(self, key: object) -> bool:
        return key in self.records

    def __len__(self) -> int:
        return len(self.records)

    def get(self, sample_id: str, method: str) -> dict | None:
        return self.records.get((sample_id, method))

    def append(self, record: dict) -> None:
        """Write ``record`` durably; a key already present is a bug in the caller."""
        key = (record["sample_id"], record["method"])
        if key in self.records:
            raise ValueError(f"{self.path}: {key} is already recorded")
        self._fh.write(json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.records[key] = record

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> JsonlLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_schema(path: Path, n: int, rec: Any) -> None:
    # Records of another schema version (an older vidspec's run folder) would be aggregated with
    # other meanings or crash on a missing field, so they are refused as a user error.
    schema = rec.get("schema") if isinstance(rec, dict) else None
    if schema != SCHEMA_VERSION:
        raise ConfigError(f"{path}: line {n} has schema {schema}, expected {SCHEMA_VERSION} "
                          "(written by another vidspec version; use a new --out)")


def read_jsonl(path: str | Path) -> list[dict]:
    """The complete records of a JSONL file, read-only (a partial last line is ignored); a ``.gz`` file is
    read through gzip (archived runs are kept compressed).

    Raises:
        ConfigError: a record has another schema version, or a ``.gz`` file is not complete gzip.
    """
    path = Path(path)
    if not path.exists():
        return []
    out = []
    seen: set[tuple[str, str]] = set()
    raw = path.read_bytes()
    if path.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:  # not gzip, or cut short
            raise ConfigError(f"{path}: not a complete gzip file ({e})") from None
    for n, line in enumerate(raw.split(b"\n")[:-1], 1):  # after the last newline: partial
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        _check_schema(path, n, rec)
        key = (rec.get("sample_id"), rec.get("method"))
        if key not in seen:
            seen.add(key)
            out.append(rec)
    return out


# ---- aggregation -----------------------------------------------------------------------------


def _mean(xs: Iterable[float | None]) -> float | None:
    vals = [float(x) for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 and num > 0 else None


def decode_tokens(rec: dict) -> int:
    """Tokens produced by the decode phase (the first token comes from prefill)."""
    return max(int(rec["num_new_tokens"]) - 1, 0)


def speedups(rec: dict, ar: dict) -> tuple[float | None, float | None]:
    """(DSR, ESR) of one record against the same sample's AR record (:data:`CONVENTIONS`)."""
    dsr = None
    if decode_tokens(rec) and decode_tokens(ar) and rec["decode_s"] > 0:
        dsr = (ar["decode_s"] / decode_tokens(ar)) / (rec["decode_s"] / decode_tokens(rec))
    esr = None
    if rec["num_new_tokens"] and ar["num_new_tokens"] and rec["wall_s"] > 0:
        esr = (ar["wall_s"] / ar["num_new_tokens"]) / (rec["wall_s"] / rec["num_new_tokens"])
    return dsr, esr


def summarize_method(method: str, records: list[dict], ar_by_sample: dict[str, dict],
                     judgements: dict[tuple[str, str], dict] | None = None) -> MethodSummary:
    """Aggregate one method's records (see :data:`CONVENTIONS`).

    Args:
        method: the method's name.
        records: its records (one per sample).
        ar_by_sample: the AR record of each sample, for speedups and retention.
        judgements: GPT judge verdicts by ``(sample_id, method)``; when a sample has one, its
            judge score is the sample's score for retention on open-ended benchmarks.
    """
    judgements = judgements or {}
    paired = [(r, ar_by_sample[r["sample_id"]]) for r in records if r["sample_id"] in ar_by_sample]

    # Ratios of totals: per-token time of AR over per-token time of the method.
    both = [(r, a) for r, a in paired if decode_tokens(r) and decode_tokens(a)]  # both sides decoded
    ar_dec = sum(a["decode_s"] for _, a in both)
    ar_dec_tok = sum(decode_tokens(a) for _, a in both)
    m_dec = sum(r["decode_s"] for r, _ in both)
    m_dec_tok = sum(decode_tokens(r) for r, _ in both)
    dsr = _ratio(ar_dec / ar_dec_tok, m_dec / m_dec_tok) if ar_dec_tok and m_dec_tok else None
    # The same with each side's prepare counted in its decode (records before the field: None).
    dsr_prep = None
    if dsr is not None and all("draft_prefill_s" in x for pair in both for x in pair):
        ar_prep = sum(a["decode_s"] + a["draft_prefill_s"] for _, a in both)
        m_prep = sum(r["decode_s"] + r["draft_prefill_s"] for r, _ in both)
        dsr_prep = _ratio(ar_prep / ar_dec_tok, m_prep / m_dec_tok)
    ar_wall = sum(a["wall_s"] for _, a in paired)
    ar_tok = sum(a["num_new_tokens"] for _, a in paired)
    m_wall = sum(r["wall_s"] for r, _ in paired)
    m_tok = sum(r["num_new_tokens"] for r, _ in paired)
    esr = _ratio(ar_wall / ar_tok, m_wall / m_tok) if ar_tok and m_tok else None

    # Acceptance by draft position pooled over rounds: weight each sample by its rounds.
    kmax = max((len(r["acceptance_by_position"]) for r in records), default=0)
    acc_pos = []
    for i in range(kmax):
        num = sum(r["acceptance_by_position"][i] * r["target_passes"] for r in records
                  if len(r["acceptance_by_position"]) > i)
        den = sum(r["target_passes"] for r in records if len(r["acceptance_by_position"]) > i)
        acc_pos.append(num / den if den else 0.0)

    def score_of(rec: dict) -> float | None:
        j = judgements.get((rec["sample_id"], rec["method"]))
        if rec["metric"] == "gpt_judge":
            # An unreadable reply counts only where its protocol scores it (lmms-eval's: 0).
            return j["judge_score"] if j else None
        return rec["score"]

    scored = [(score_of(r), score_of(a)) for r, a in paired]
    scored = [(s, sa) for s, sa in scored if s is not None and sa is not None]
    score = _mean(s for s, _ in scored)
    ar_score = _mean(sa for _, sa in scored)
    retention = score / ar_score if score is not None and ar_score else None

    judged = [judgements[(r["sample_id"], method)] for r in records if (r["sample_id"], method) in judgements]
    split = round_split(records)
    # Does the drafter's prepare hide under the target's prefill? The median over samples of the
    # method's prefill minus AR's on the same sample (sample-to-sample noise cancels).
    deltas = [1000.0 * (r["prefill_s"] - a["prefill_s"]) for r, a in paired
              if r.get("prefill_s") is not None and a.get("prefill_s") is not None]
    split["prefill_vs_ar_ms_median"] = statistics.median(deltas) if deltas else None
    dec_s = sum(r["decode_s"] for r in records)
    taus = [r["tau"] for r in records]
    halls = [r["fact_hallucinations"] for r in records if r["fact_hallucinations"] is not None]
    return MethodSummary(
        method=method,
        n_samples=len(records),
        n_with_ar=len(paired),
        tau=sum(taus) / len(taus) if taus else 0.0,
        tau_min=min(taus, default=0.0),
        tau_max=max(taus, default=0.0),
        acceptance_by_position=acc_pos,
        dsr=dsr,
        dsr_prepare_in_decode=dsr_prep,
        esr=esr,
        tokens_per_s=sum(decode_tokens(r) for r in records) / dec_s if dec_s > 0 else None,
        mean_new_tokens=_mean(r["num_new_tokens"] for r in records) or 0.0,
        token_identical_share=_mean(float(r["token_identical_to_ar"]) for r, _ in paired),
        score=score,
        ar_score=ar_score,
        retention=retention,
        accuracy=_mean(float(r["correct"]) for r in records if r["correct"] is not None),
        fact_precision=_mean(r["fact_precision"] for r in records),
        fact_recall=_mean(r["fact_recall"] for r in records),
        hallucinations_per_sample=_mean(halls) if halls else None,
        judge_score=_mean(j["judge_score"] for j in judged),
        judge_unparsable=sum(j["judge_status"] != "ok" for j in judged),
        judge_accuracy=_mean(j["judge_acc"] if j.get("judge_acc") is not None else float(j["judge_correct"])
                             for j in judged if j.get("judge_acc") is not None or j.get("judge_correct") is not None),
        loose_accepted=sum(r["loose_accepted"] for r in records),
        shift_accepted=sum(r["shift_accepted"] for r in records),
        **split,
    )


def round_split(records: list[dict]) -> dict[str, Any]:
    """Where one method's decode time goes, from the records that carry the split.

    ``begin_ms``: mean per sample of the drafter's ``begin``; ``draft_prefill_ms``: of its ``prepare`` (in
    the prefill); ``prefill_ms``: of the whole prefill phase (to set against AR's: a drafter's ``prepare``
    that does not hide under the target's prefill makes it longer); ``draft_ms_per_round`` /
    ``verify_ms_per_round``: pooled over all rounds (a sample weighs by its rounds); ``drafter``:
    the drafter class (joined with "," if records disagree). None where no record has the field
    (runs recorded before it existed).
    """
    timed = [r for r in records if r.get("draft_ms_per_round") is not None and r["target_passes"]]
    rounds = sum(r["target_passes"] for r in timed)

    def per_round(key: str) -> float | None:
        return sum(r[key] * r["target_passes"] for r in timed) / rounds if rounds else None

    begin = _mean(r["begin_s"] * 1000.0 for r in records if r.get("begin_s") is not None)
    draft_prefill = _mean(r["draft_prefill_s"] * 1000.0 for r in records if r.get("draft_prefill_s") is not None)
    drafters = sorted({r["drafter"] for r in records if r.get("drafter")})
    prefill = _mean(r["prefill_s"] * 1000.0 for r in records if r.get("prefill_s") is not None)
    return dict(begin_ms=begin, draft_prefill_ms=draft_prefill, prefill_ms=prefill,
                draft_ms_per_round=per_round("draft_ms_per_round"),
                verify_ms_per_round=per_round("verify_ms_per_round"),
                drafter=",".join(drafters) if drafters else None)


def summarize(records: list[dict], methods: Iterable[str] | None = None,
              judgements: list[dict] | None = None) -> dict[str, MethodSummary]:
    """Per-method aggregates of a run's records, in ``methods`` order (default: as first seen)."""
    order = list(methods) if methods is not None else list(dict.fromkeys(r["method"] for r in records))
    ar = {r["sample_id"]: r for r in records if r["method"] == "ar"}
    jmap = {(j["sample_id"], j["method"]): j for j in (judgements or [])}
    out: dict[str, MethodSummary] = {}
    for m in order:
        recs = [r for r in records if r["method"] == m]
        if recs:
            out[m] = summarize_method(m, recs, ar, jmap)
    return out


def category_scores(records: list[dict], methods: Iterable[str], judgements: list[dict] | None = None
                    ) -> dict[str, dict[str, dict[str, tuple[float, int]]]]:
    """Per-category scores: ``{category: {value: {method: (mean score, n)}}}``.

    The categories are those the records carry (``categories``, from the task's ``categories`` key:
    Video-MME's duration, domain and task type; MVBench's sub-task; LongVideoBench's duration group
    and question category; MovieChat's global / breakpoint). The score is a record's MCQ correctness
    or its judge score (as in :func:`summarize_method`); unscored records are left out.
    """
    jmap = {(j["sample_id"], j["method"]): j for j in (judgements or [])}
    out: dict[str, dict[str, dict[str, list[float]]]] = {}
    for r in records:
        if r["metric"] == "gpt_judge":
            j = jmap.get((r["sample_id"], r["method"]))
            score = j["judge_score"] if j else None
        else:
            score = r["score"]
        if score is None:
            continue
        for cat, value in (r.get("categories") or {}).items():
            out.setdefault(cat, {}).setdefault(value, {}).setdefault(r["method"], []).append(float(score))
    order = list(methods)
    return {cat: {value: {m: (sum(v[m]) / len(v[m]), len(v[m])) for m in order if m in v}
                  for value, v in sorted(values.items())}
            for cat, values in out.items()}


def run_file(run: str | Path, name: str) -> Path:
    """``run/name``, or ``run/name.gz`` when only the archived (gzipped) copy is there."""
    path = Path(run) / name
    gz = path.with_name(name + ".gz")
    return gz if not path.exists() and gz.exists() else path


def iter_runs(path: str | Path) -> Iterator[Path]:
    """Run folders at ``path``: the folder itself when it holds ``records.jsonl`` (or its archived
    ``records.jsonl.gz``), else its subfolders that do."""
    path = Path(path)
    if run_file(path, "records.jsonl").exists():
        yield path
        return
    for sub in sorted(p for p in path.iterdir() if p.is_dir()) if path.is_dir() else []:
        if run_file(sub, "records.jsonl").exists():
            yield sub
