"""The runner's warm-up captures the fast engine's graphs before timing; records split decode time per round."""

from __future__ import annotations

import numpy as np

from vidspec.decoding.engine import SpeculativeDecoder
from vidspec.decoding.fast import FastStrictVerifier, FastTarget
from vidspec.decoding.models import load_target
from vidspec.decoding.sparrow import new_sparrow_for
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
    cfg = EvalConfig(benchmark="synthvid_captions", data=str(synthvid), out=str(tmp_path / "run"), sparrow="random",
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
