"""Warm-up graph capture before timing, per-round decode timing, and one read per sample (share_video)."""

from __future__ import annotations

import numpy as np
import pytest

from vidspec.decoding.drafters.sparrow import new_sparrow_for
from vidspec.decoding.errors import ConfigError
from vidspec.decoding.fast import FastStrictVerifier, FastTarget
from vidspec.decoding.loops.chain import SpeculativeDecoder
from vidspec.decoding.models import load_target
from vidspec.decoding.testing import emulated_graph_drafter_class
from vidspec.decoding.types import Request, VideoClip
from vidspec.evaluation.records import read_jsonl, summarize
from vidspec.evaluation.runner import EvalConfig, capture_fast_graphs, run_eval

EmulatedGraphDrafter = emulated_graph_drafter_class()


def test_warmup_capture_leaves_no_graph_for_the_timed_decodes():
    target = load_target("tiny-qwen2.5-vl")
    rng = np.random.default_rng(1)
    clip = VideoClip(frames=rng.integers(0, 255, (8, 56, 84, 3), dtype=np.uint8), fps=4.0, source="memory")
    req = Request("What happens in this video?", clip)
    ar = SpeculativeDecoder(target).generate(req, max_new_tokens=40)
    fast = FastTarget(target, max_len=512)
    drafter = EmulatedGraphDrafter(new_sparrow_for(target), max_len=256, bucket=16)
    dec = SpeculativeDecoder(fast, drafter, FastStrictVerifier(), k=4, method="sparrow")
    dec.generate(req, max_new_tokens=8)  # the runner's untimed warm-up decode
    warm = drafter.graph_captures
    n = capture_fast_graphs(dec, 40)
    assert n > 0 and drafter.graph_captures == warm + n
    assert capture_fast_graphs(dec, 40) == 0  # all there already
    assert {t for t, _, _ in drafter._eng.graphs} == {1, 2, 3, 4, 5}
    assert {k for _, k, _ in drafter._eng.graphs} == {1, 2, 3, 4}  # chains of k drafts, fewer near the budget
    res = dec.generate(req, max_new_tokens=40)
    assert res.token_ids == ar.token_ids
    assert drafter.graph_captures == warm + n, "a graph was captured inside the timed decode"
    # AR on a CPU FastTarget: no graphs anywhere, nothing to capture
    assert capture_fast_graphs(SpeculativeDecoder(fast), 40) == 0


def test_records_and_summary_split_decode_time(synthvid, tmp_path):
    cfg = EvalConfig.from_flags(benchmark="synthvid_captions", data=str(synthvid), out=str(tmp_path / "run"), sparrow="random",
                     methods=("ar", "sparrow"), engine="fast", fast_max_len=1024, max_new_tokens=12, progress=False)
    summary = run_eval(cfg)
    records = read_jsonl(tmp_path / "run" / "records.jsonl")
    assert len(records) == 4
    for r in records:
        assert r["begin_s"] >= 0 and r["draft_ms_per_round"] >= 0 and r["verify_ms_per_round"] >= 0
        spent = r["begin_s"] + (r["draft_ms_per_round"] + r["verify_ms_per_round"]) * r["target_passes"] / 1000
        assert spent <= r["decode_s"] + 1e-9
        assert r["drafter"] == ("NoDrafter" if r["method"] == "ar" else "FastSparrowDrafter")
        # The prompt feed runs in the drafter's prepare, inside the prefill phase (none for AR).
        assert 0 <= r["draft_prefill_s"] <= r["prefill_s"]
        assert (r["draft_prefill_s"] > 0) == (r["method"] == "sparrow")
    for m in ("ar", "sparrow"):
        s = summary["methods"][m]
        assert s["draft_ms_per_round"] >= 0 and s["verify_ms_per_round"] > 0 and s["begin_ms"] >= 0
    assert summary["methods"]["sparrow"]["drafter"] == "FastSparrowDrafter"
    sp = summary["methods"]["sparrow"]
    assert sp["begin_ms"] > 0 and sp["draft_prefill_ms"] > 0 and sp["prefill_ms"] > sp["draft_prefill_ms"]
    assert summary["methods"]["ar"]["draft_prefill_ms"] == 0
    assert summary["methods"]["ar"]["prefill_vs_ar_ms_median"] == 0  # AR against itself
    assert isinstance(sp["prefill_vs_ar_ms_median"], float)

    # Records written before these fields existed still summarise (the split is then unknown).
    old = [{k: v for k, v in r.items() if k not in ("begin_s", "draft_ms_per_round", "verify_ms_per_round",
                                                     "drafter", "draft_prefill_s")} for r in records]
    s = summarize(old)["sparrow"]
    assert s["draft_ms_per_round"] is None and s["begin_ms"] is None and s["drafter"] is None
    assert s["draft_prefill_ms"] is None
    assert s["tau"] == summary["methods"]["sparrow"]["tau"]


def test_share_video_reads_each_sample_once_and_changes_no_token(synthvid, tmp_path, monkeypatch):
    from vidspec.decoding.testing import count_video_reads

    reads = count_video_reads(monkeypatch)
    methods = ("ar", "sd", "lvspec-pst", "sparrow")
    runs = {}
    for share in (False, True):
        reads.clear()
        cfg = EvalConfig.from_flags(benchmark="synthvid_captions", data=str(synthvid), out=str(tmp_path / f"run-{share}"),
                         sparrow="random", methods=methods, max_new_tokens=10, limit=2, share_video=share,
                         progress=False)
        run_eval(cfg)
        runs[share] = read_jsonl(tmp_path / f"run-{share}" / "records.jsonl")
        samples = {r["sample_id"] for r in runs[share]}
        # the warm-up decodes read the first sample too: per method without sharing, once with it
        assert len(reads) == (len(samples) * len(methods) + len(methods) if not share else len(samples))
    key = lambda r: (r["sample_id"], r["method"])  # noqa: E731
    plain, shared = sorted(runs[False], key=key), sorted(runs[True], key=key)
    assert [key(r) for r in plain] == [key(r) for r in shared]
    assert [r["token_ids"] for r in plain] == [r["token_ids"] for r in shared]
    for sid in {r["sample_id"] for r in shared}:
        # every method of a sample is charged the same read, and its wall time includes it
        mine = [r for r in shared if r["sample_id"] == sid]
        assert len({r["video_s"] for r in mine}) == 1 and mine[0]["video_s"] > 0
        assert all(r["wall_s"] >= r["video_s"] + r["decode_s"] for r in mine)
    # a run recorded without sharing does not resume with it (its ESRs would mix two conventions)
    with pytest.raises(ConfigError, match="share_video"):
        run_eval(EvalConfig.from_flags(benchmark="synthvid_captions", data=str(synthvid), out=str(tmp_path / "run-False"),
                            sparrow="random", methods=methods, max_new_tokens=10, limit=2, share_video=True,
                            progress=False))
