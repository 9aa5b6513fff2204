"""The runner warms decoders with their own warm-up (the user path's), and records what the adaptive policy did."""

from __future__ import annotations

from vidspec.decoding.loops.chain import SpeculativeDecoder
from vidspec.evaluation.records import read_jsonl
from vidspec.evaluation.runner import EvalConfig, run_eval


def test_runner_warms_with_the_decoders_warmup_and_records_k_history(synthvid, tmp_path, monkeypatch):
    calls = []
    original = SpeculativeDecoder.warmup

    def spy(self, *args, **kw):
        info = original(self, *args, **kw)
        calls.append((self.method, kw, info))
        return info

    monkeypatch.setattr(SpeculativeDecoder, "warmup", spy)
    cfg = EvalConfig.from_flags(benchmark="synthvid_captions", data=str(synthvid), out=str(tmp_path / "run"),
                                methods="ar,sd", max_new_tokens=10, limit=2, progress=False)
    run_eval(cfg)
    # one warm-up per method, on the first sample's request, graphs planned for requests of the run's budget
    assert [m for m, _, _ in calls] == ["ar", "sd"]
    for _, kw, info in calls:
        assert kw["request"].clip is not None and kw["request_tokens"] == 10 and kw["max_new_tokens"] == 8
        assert info["detail"]["decode_s"] > 0
    records = read_jsonl(tmp_path / "run" / "records.jsonl")
    warm = {m: info["warmup_s"] for m, _, info in calls}
    for r in records:
        assert r["warmup_s"] == warm[r["method"]] and r["load_s"] > 0
        if r["method"] == "ar":
            assert "k_history" not in r  # nothing adapts in AR
        else:
            # the adaptive policy's K per request, as `vidspec generate --json` shows it
            assert r["k_history"][0] == [0, r["k"]] and "drafting_stopped_at" in r
            assert all(k <= r["k"] for _, k in r["k_history"])


def test_no_k_history_without_the_policy(synthvid, tmp_path):
    cfg = EvalConfig.from_flags(benchmark="synthvid_captions", data=str(synthvid), out=str(tmp_path / "run"),
                                methods="ar,sd", max_new_tokens=8, limit=1, adaptive=False, warmup=False,
                                progress=False)
    run_eval(cfg)
    records = read_jsonl(tmp_path / "run" / "records.jsonl")
    assert records and all("k_history" not in r and r["warmup_s"] == 0.0 for r in records)
