"""Does a relevance scorer find SynthVid's visual words? AUC per scorer and layer, with controls.

For the release target (and a random-weight model of the same config as the control), teacher-force
caption token sequences on held-out videos: the target's own greedy captions ("generated") and the
dataset's reference captions of both styles ("reference"). For every caption token compute

  cos@N         mean of the top-N cosine similarities between the token's hidden state and the
                visual tokens' hidden states of the same layer (N = 1, 10, 100), layers 0..L
  probe         logistic-regression probe (``fit_probe``) on the layer's hidden state, fit on the
                tokens of the ``--fit-split`` videos, scored on the ``--eval-split`` videos
  attn          attention mass from the row to the visual positions (eager attention,
                ``output_attentions``; mean over heads), layers 1..L
  cf-kl         counterfactual visual dependence: KL(p_video || p_grey) of the next-token
                distribution that predicts the token, with a second pass on a uniform grey video
                of the same length (an oracle-style score: a second prefill, not deployable as is)
  cf-dlogp      |log p_video(tok) - log p_grey(tok)| at the same position
  random        uniform random scores (the control scorer)

Hidden-state scorers are read at two rows (``LVSpecConfig.score_row``): ``token`` (the row whose
input is the token, what the verifier reads for d_i by default) and ``predictor`` (the row that
predicts the token). Labels: SynthVid's exact word labels of the target tokenizer (``token_labels``):
visual = colour/shape/size/motion/count/event, filler = everything else; special tokens dropped.
AUC is reported on the eval-split videos for every scorer (so the probe is always out of sample).

The best deployable probe (highest eval AUC on generated tokens among probe rows) is saved with
``ProbeScorer.save`` (fit on the fit split) for ``benchmarks/loose_ablation.py``.

Usage::

    .venv/bin/python benchmarks/relevance_auc.py            # ~1-2 min on 2 CPU cores
    .venv/bin/python benchmarks/relevance_auc.py --limit 10 --out /tmp/r.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from vidspec.evaluation.runner import git_info, machine_info

ROOT = Path(__file__).resolve().parents[1]
TOP_NS = (1, 10, 100)


def grey_clip(clip):
    """The same clip (frame count, size) with every pixel mid-grey: the no-video counterfactual."""
    from vidspec.decoding.types import VideoClip

    frames = np.full_like(clip.frames, 128)
    return VideoClip(frames=frames, fps=clip.fps, source=f"grey({clip.source})", timestamps=clip.timestamps)


@torch.inference_mode()
def teacher_force(adapter, request, caption_ids: list[int], attentions: bool) -> dict:
    """One full forward of prompt + caption: hidden states of every layer, attentions, log-probs.

    Returns a dict with ``hidden`` (L+1, T, d), ``visual`` (L_vis,) visual positions, ``start``
    (index of the first caption token), ``logp`` (T, V) log-softmax of next-token logits and
    ``attn_vis`` (L, T) attention mass on visual positions (mean over heads), if asked.
    """
    ids, visual = adapter.build_prompt(request)
    start = ids.shape[0]
    full = torch.cat([ids, torch.tensor(caption_ids, dtype=torch.long)])
    dev = adapter.device
    input_ids = full[None].to(dev)
    embeds = adapter.model.get_input_embeddings()(input_ids)
    vis_pos = torch.nonzero(full == adapter.video_token_id).flatten()
    if visual is not None:
        feats = adapter.video_features(visual).to(embeds.dtype)
        embeds[0, vis_pos.to(dev)] = feats
    positions, _ = adapter.prefill_positions(input_ids, visual)
    lm = adapter.model.model.language_model
    out = lm(inputs_embeds=embeds, position_ids=positions, use_cache=False, output_hidden_states=True,
             output_attentions=attentions, return_dict=True)
    hidden = torch.stack([h[0] for h in out.hidden_states]).float()  # (L+1, T, d)
    logp = F.log_softmax(adapter.model.lm_head(out.last_hidden_state[0]).float(), dim=-1)
    res = {"hidden": hidden, "visual": vis_pos, "start": start, "logp": logp}
    if attentions:
        # each (1, H, T, T): mass of each query row on the visual key positions, averaged over heads
        res["attn_vis"] = torch.stack([a[0][:, :, vis_pos].sum(-1).mean(0) for a in out.attentions]).float()
    return res


def cosine_topn(hidden: torch.Tensor, rows: torch.Tensor, vis: torch.Tensor) -> dict[int, torch.Tensor]:
    """{N: (L+1, len(rows))} mean top-N cosine between each row's state and the visual states."""
    h = F.normalize(hidden[:, rows], dim=-1)  # (L+1, R, d)
    v = F.normalize(hidden[:, vis], dim=-1)  # (L+1, V, d)
    sim = h @ v.transpose(1, 2)  # (L+1, R, V)
    return {n: sim.topk(min(n, sim.shape[-1]), dim=-1).values.mean(-1) for n in TOP_NS}


def scores_for(adapter, request, grey_request, caption_ids: list[int]) -> dict:
    """Every training-free score of every caption token, plus the hidden states the probe needs."""
    real = teacher_force(adapter, request, caption_ids, attentions=True)
    cf = teacher_force(adapter, grey_request, caption_ids, attentions=False)
    s, n = real["start"], len(caption_ids)
    tok_rows = torch.arange(s, s + n)
    pred_rows = tok_rows - 1
    toks = torch.tensor(caption_ids)
    out: dict[str, torch.Tensor] = {}
    for row_name, rows in (("token", tok_rows), ("predictor", pred_rows)):
        for nn, val in cosine_topn(real["hidden"], rows, real["visual"]).items():
            for layer in range(val.shape[0]):
                out[f"cos@{nn}|{row_name}|L{layer}"] = val[layer]
        for layer in range(real["attn_vis"].shape[0]):
            out[f"attn|{row_name}|L{layer + 1}"] = real["attn_vis"][layer, rows]
    p_real, p_cf = real["logp"][pred_rows], cf["logp"][pred_rows]
    out["cf-kl|predictor|out"] = (p_real.exp() * (p_real - p_cf)).sum(-1)
    out["cf-dlogp|predictor|out"] = (p_real.gather(1, toks[:, None]) - p_cf.gather(1, toks[:, None])).abs()[:, 0]
    hid = {"token": real["hidden"][:, tok_rows], "predictor": real["hidden"][:, pred_rows]}
    return {"scores": out, "hidden": hid}


def random_model_like(target, seed: int):
    """A random-weight model of the target's exact config and tokenizer, wrapped in the same adapter."""
    torch.manual_seed(seed)
    model = type(target.model)(target.model.config).eval()
    return type(target)(model, target.tokenizer, f"random-init({target.name})", max_frames=target.max_frames)


def pick_videos(data: Path, split: str, limit: int):
    from datasets import load_from_disk

    rows: dict[str, list[dict]] = {}
    for r in load_from_disk(str(data))[split]:
        if r["video"] not in rows and len(rows) >= limit:
            continue
        rows.setdefault(r["video"], []).append(r)
    return rows


def main() -> None:
    from vidspec.decoding.methods import build_decoder
    from vidspec.decoding.models import load_target
    from vidspec.decoding.types import Request
    from vidspec.decoding.verifiers.relevance import ProbeFitConfig, auc, fit_probe
    from vidspec.evaluation.synthvid.grammar import VISUAL_LABELS
    from vidspec.evaluation.synthvid.tokenizer import token_labels

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data/cache/synthvid-heldout")
    ap.add_argument("--target", default="data/releases/synthvid-target")
    ap.add_argument("--fit-split", default="validation")
    ap.add_argument("--eval-split", default="test")
    ap.add_argument("--limit", type=int, default=30, help="videos per split (fit and eval)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/relevance_auc.json")
    ap.add_argument("--probe-row", default="predictor", choices=("token", "predictor"),
                    help="row of the probe saved for the ablation (predictor: the state that predicts d_i)")
    ap.add_argument("--probe-out", default="benchmarks/results/relevance_probe.safetensors")
    args = ap.parse_args()
    t_start = time.perf_counter()
    torch.manual_seed(args.seed)

    data = Path(args.data)
    target = load_target(args.target, device="cpu")
    target.model.set_attn_implementation("eager")  # output_attentions needs the eager kernel
    control = random_model_like(target, args.seed)
    control.model.set_attn_implementation("eager")
    ar = build_decoder("ar", target=target)
    tok = target.tokenizer

    # token records: model -> list of dicts (split, source, label, scores..., hidden)
    records: dict[str, list[dict]] = {"target": [], "random-init": []}
    gen_examples = []
    for split in (args.fit_split, args.eval_split):
        for video, rows in pick_videos(data, split, args.limit).items():
            clip = target.read_video(str(data / video))
            req = Request(prompt=rows[0]["question"], clip=clip)
            greq = Request(prompt=rows[0]["question"], clip=grey_clip(clip))
            gen = ar.generate(req, max_new_tokens=args.max_new_tokens)
            seqs = [("generated", list(gen.token_ids))]
            if len(gen_examples) < 3:
                gen_examples.append(gen.text)
            for r in rows:
                ref = tok(r["answer"], add_special_tokens=False)["input_ids"]
                seqs.append(("reference", list(ref)))
            for source, ids in seqs:
                labels = token_labels(ids, tok)
                keep = [i for i, lab in enumerate(labels) if lab != "special"]
                if not keep:
                    continue
                for mname, adapter in (("target", target), ("random-init", control)):
                    res = scores_for(adapter, req, greq, ids)
                    for i in keep:
                        records[mname].append({
                            "split": split, "source": source, "video": video, "label": labels[i],
                            "visual": labels[i] in VISUAL_LABELS,
                            "scores": {k: float(v[i]) for k, v in res["scores"].items()},
                            "hidden": {row: h[:, i].clone() for row, h in res["hidden"].items()},
                        })
    t_feat = time.perf_counter() - t_start

    num_layers = target.num_layers
    results: dict[str, dict] = {}
    best_probe = None
    gen_rand = torch.Generator().manual_seed(args.seed)
    for mname, recs in records.items():
        fit = [r for r in recs if r["split"] == args.fit_split]
        ev = [r for r in recs if r["split"] == args.eval_split]
        # probes: one per (row, layer), fit on the fit split, scored on the eval split
        for row in ("token", "predictor"):
            y_fit = torch.tensor([r["visual"] for r in fit])
            for layer in range(num_layers + 1):
                x_fit = torch.stack([r["hidden"][row][layer] for r in fit])
                probe = fit_probe(x_fit, y_fit, ProbeFitConfig(),
                                  metadata={"model": args.target, "layer": str(layer), "score_row": row})
                x_ev = torch.stack([r["hidden"][row][layer] for r in ev])
                s = probe.logits(x_ev)
                for r, v in zip(ev, s.tolist()):
                    r["scores"][f"probe|{row}|L{layer}"] = v
                if mname == "target" and row == args.probe_row:
                    # generated tokens only; ties go to the layer nearest the default (middle) one
                    gen = [(v, r["visual"]) for r, v in zip(ev, s.tolist()) if r["source"] == "generated"]
                    a = auc([g[0] for g in gen], [g[1] for g in gen])
                    rank = (a, -abs(layer - num_layers // 2))
                    if best_probe is None or rank > best_probe[0]:
                        best_probe = (rank, row, layer, probe)
        rnd = torch.rand(len(ev), generator=gen_rand).tolist()
        for r, v in zip(ev, rnd):
            r["scores"]["random|-|-"] = v
        table: dict[str, dict] = {}
        for key in ev[0]["scores"]:
            entry = {}
            for subset in ("generated", "reference", "all"):
                sub = [r for r in ev if subset == "all" or r["source"] == subset]
                y = [r["visual"] for r in sub]
                if any(y) and not all(y):
                    entry[subset] = auc([r["scores"][key] for r in sub], y)
            table[key] = entry
        results[mname] = {
            "tokens_eval": {s: sum(r["source"] == s for r in ev) for s in ("generated", "reference")},
            "visual_share_eval": sum(r["visual"] for r in ev) / max(1, len(ev)),
            "tokens_fit": len(fit),
            "auc": table,
        }

    # the best deployable probe, saved for the ablation (layer and row in its metadata)
    assert best_probe is not None
    Path(args.probe_out).parent.mkdir(parents=True, exist_ok=True)
    best_probe[3].save(args.probe_out)

    # ---- table: best layer per (scorer family, row), target vs random-init control ----
    def fam(key: str) -> tuple[str, str]:
        name, row, _ = key.split("|")
        return name, row

    summary = []
    families = sorted({fam(k) for k in results["target"]["auc"]}, key=lambda x: (x[0], x[1]))
    for f in families:
        row_s = {"scorer": f[0], "row": f[1]}
        for mname in ("target", "random-init"):
            tab = results[mname]["auc"]
            keys = [k for k in tab if fam(k) == f and "generated" in tab[k]]
            best = max(keys, key=lambda k: tab[k]["generated"])
            row_s[mname] = {"best_key": best, "generated": tab[best]["generated"],
                            "reference": tab[best].get("reference"),
                            "per_layer_generated": {k.split("|")[2]: round(tab[k]["generated"], 4) for k in keys}}
        summary.append(row_s)

    best = max(summary, key=lambda s: s["target"]["generated"])
    deployable = [s for s in summary if s["scorer"] not in ("cf-kl", "cf-dlogp")]
    best_dep = max(deployable, key=lambda s: s["target"]["generated"])
    report = {
        "benchmark": "relevance_auc",
        "command": "python benchmarks/relevance_auc.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()),
        "machine": machine_info(), "git": git_info(ROOT),
        "data": str(data), "fit_split": args.fit_split, "eval_split": args.eval_split,
        "videos_per_split": args.limit, "target": args.target, "num_layers": num_layers,
        "labels": "SynthVid token_labels: visual = " + ",".join(VISUAL_LABELS) + "; filler = rest; specials dropped",
        "auc_convention": "ROC AUC on eval-split tokens (visual positive); 'generated' = target's greedy captions",
        "generated_examples": gen_examples,
        "summary": summary,
        "best": {"scorer": best["scorer"], "row": best["row"], "key": best["target"]["best_key"],
                 "auc_generated": best["target"]["generated"],
                 "control_auc_generated": results["random-init"]["auc"].get(best["target"]["best_key"], {}).get("generated")},
        "best_deployable": {"scorer": best_dep["scorer"], "row": best_dep["row"], "key": best_dep["target"]["best_key"],
                            "auc_generated": best_dep["target"]["generated"]},
        "target_auc_0_9_met": best["target"]["generated"] >= 0.9,
        "probe_saved": {"path": args.probe_out, "row": best_probe[1], "layer": best_probe[2],
                        "eval_auc_generated": best_probe[0][0]},
        "models": results,
        "seconds": {"features": t_feat, "total": time.perf_counter() - t_start},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")

    print(f"relevance AUC, eval split '{args.eval_split}' ({results['target']['tokens_eval']} tokens, "
          f"visual share {results['target']['visual_share_eval']:.2f}); best layer per scorer")
    print(f"{'scorer':10s} {'row':10s} | {'target gen':>10s} {'(layer)':>7s} {'target ref':>10s} | "
          f"{'rand-init gen':>13s} {'(layer)':>7s}")
    for s in summary:
        t, c = s["target"], s["random-init"]
        print(f"{s['scorer']:10s} {s['row']:10s} | {t['generated']:10.3f} {t['best_key'].split('|')[2]:>7s} "
              f"{(t['reference'] or float('nan')):10.3f} | {c['generated']:13.3f} {c['best_key'].split('|')[2]:>7s}")
    print("per-layer AUC on generated tokens (target):")
    for s in summary:
        print(f"  {s['scorer']:9s} {s['row']:10s}", " ".join(f"{k}={v:.3f}" for k, v in
                                                           s["target"]["per_layer_generated"].items()))
    print(f"best: {report['best']}  -> AUC >= 0.9 target {'MET' if report['target_auc_0_9_met'] else 'MISSED'}")
    print(f"best deployable: {report['best_deployable']}; probe saved: {report['probe_saved']}")
    print(f"wrote {args.out} in {report['seconds']['total']:.0f} s")


if __name__ == "__main__":
    main()
