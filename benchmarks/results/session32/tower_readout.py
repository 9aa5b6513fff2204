"""Does a trained Qwen2.5-VL tower hold more shape than its pretraining probe reads? (session 32, CPU)

The pretraining probe (vision_pretrain.QwenTowerProbe) reads shape linearly from the *mean* of frame pair 0's
merged tokens. The language model reads the tokens one by one, so the probe may understate what the tower gives it.
This loads a stage's (or release's) Qwen2.5-VL tower and merger, encodes rendered one-object scenes exactly as the
probe does (two frame pairs [first, first], [last, last]), and fits read-outs on the frozen features:

- mean: linear on the mean of the merged tokens of pair 0 (the pretraining probe's read-out, refitted);
- flat: linear on all merged tokens of pair 0, concatenated (keeps where each token is);
- mlp-max: a 2-layer MLP on each merged token, max-pooled over the tokens;
- and the same three on the tower's last hidden states before the merger (``pre-merger``).

Read-out training scenes: make_data(N, --train-seed): seed 0 is the tower's own pretraining set (as
vision_learnability.py draws it), seed 2 scenes it never saw; held out: make_data(2000, seed 1), the probe's test set.

    OMP_NUM_THREADS=2 python benchmarks/results/session32/tower_readout.py \
        --model /tmp/s30/gpu/stages/synthvid-target-sft --tower-json /tmp/s30/gpu/vision/tower.json \
        --train 20000 --out benchmarks/results/session32/tower_readout_s30.json
"""
import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
from vision_learnability import make_data  # noqa: E402

from vidspec.draft_training.arch import ArchConfig  # noqa: E402
from vidspec.draft_training.vision_pretrain import QwenTowerProbe  # noqa: E402


def load_tower(model_dir: str, tower_json: str) -> QwenTowerProbe:
    from safetensors.torch import load_file

    arch = ArchConfig(**json.loads(Path(tower_json).read_text())["arch"])
    probe = QwenTowerProbe(arch, (6, 10, 5))
    state = load_file(str(Path(model_dir) / "model.safetensors"))
    tower = {k.split("visual.", 1)[1]: v.float() for k, v in state.items() if "visual." in k}
    probe.tower.load_state_dict(tower, strict=True)
    return probe.eval()


@torch.no_grad()
def encode(probe: QwenTowerProbe, first, last, batch: int = 250):
    merged, pre = [], []
    for s in range(0, first.shape[0], batch):
        b = first[s:s + batch].shape[0]
        out = probe.encode(first[s:s + batch], last[s:s + batch])
        tok = out.pooler_output.view(b, 2, -1, out.pooler_output.shape[-1])[:, 0]
        hid = out.last_hidden_state.view(b, 2, -1, out.last_hidden_state.shape[-1])[:, 0]  # window order: a set
        merged.append(tok.clone())
        pre.append(hid.clone())
    return torch.cat(merged), torch.cat(pre)


class Readout(nn.Module):
    def __init__(self, kind: str, tokens: int, d: int, classes: int):
        super().__init__()
        self.kind = kind
        if kind == "mean":
            self.net = nn.Linear(d, classes)
        elif kind == "flat":
            self.net = nn.Linear(tokens * d, classes)
        else:
            self.net = nn.Sequential(nn.Linear(d, 256), nn.GELU(), nn.Linear(256, classes))

    def forward(self, x):  # (B, tokens, d)
        if self.kind == "mean":
            return self.net(x.mean(1))
        if self.kind == "flat":
            return self.net(x.flatten(1))
        return self.net(x).amax(1)


def fit(kind, xtr, ytr, xte, yte, steps: int, seed: int = 0, groups: dict | None = None) -> dict:
    """Train a read-out; its accuracy on (the first 4000 of) its training set and held out, and held out on each
    boolean mask of ``groups`` (name -> mask over ``xte``)."""
    torch.manual_seed(seed)
    mu, sd = xtr.mean((0, 1), keepdim=True), xtr.std((0, 1), keepdim=True) + 1e-5
    xtr, xte = (xtr - mu) / sd, (xte - mu) / sd
    m = Readout(kind, xtr.shape[1], xtr.shape[2], int(ytr.max()) + 1)
    opt = torch.optim.AdamW(m.parameters(), lr=2e-3, weight_decay=1e-2)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    for _ in range(steps):
        i = torch.randint(0, xtr.shape[0], (256,))
        loss = nn.functional.cross_entropy(m(xtr[i]), ytr[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    with torch.no_grad():
        tr = float((m(xtr[:4000]).argmax(-1) == ytr[:4000]).float().mean())
        right = (m(xte).argmax(-1) == yte).float()
    out = {"train": round(tr, 4), "held_out": round(float(right.mean()), 4)}
    return out | {name: round(float(right[mask].mean()), 4) for name, mask in (groups or {}).items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="exported Qwen2.5-VL folder (a stage or release)")
    ap.add_argument("--tower-json", required=True, help="the tower's tower.json (its ArchConfig)")
    ap.add_argument("--train", type=int, default=20000)
    ap.add_argument("--train-seed", type=int, default=0,
                    help="seed of the read-outs' training scenes: 0 is the tower's own pretraining set, 2 fresh scenes")
    ap.add_argument("--test", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=3000, help="read-out training steps (batch 256)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    t0 = time.perf_counter()
    probe = load_tower(a.model, a.tower_json)
    tr = make_data(a.train, a.train_seed, "easy", probe.patch * 8, a.workers)
    te = make_data(a.test, 1, "easy", probe.patch * 8, a.workers)
    print(f"rendered {a.train}+{a.test} scenes in {time.perf_counter() - t0:.0f} s", flush=True)
    feats_tr, feats_te = encode(probe, tr[0], tr[1]), encode(probe, te[0], te[1])
    print(f"encoded in {time.perf_counter() - t0:.0f} s", flush=True)
    rows = []
    for name, i in (("merged", 0), ("pre-merger", 1)):
        for kind in ("mean", "flat", "mlp-max"):
            for attr, col in (("shape", 0), ("colour", 1)):
                r = fit(kind, feats_tr[i], tr[2][:, col], feats_te[i], te[2][:, col], a.steps)
                rows.append({"features": name, "readout": kind, "attribute": attr, **r})
                print(json.dumps(rows[-1]), flush=True)
    doc = {"args": vars(a), "machine": {"python": platform.python_version(), "torch": torch.__version__,
                                         "cpu": platform.processor() or platform.machine(),
                                         "threads": torch.get_num_threads()},
           "chance": {"shape": 1 / 6, "colour": 1 / 10}, "seconds": round(time.perf_counter() - t0, 1), "rows": rows}
    Path(a.out).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
