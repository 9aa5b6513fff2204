"""Rebuild a run's JSON from its printed log, for the two runs whose JSON write failed (a path bug in the script's
first version, fixed since): siglip 800 5e-4 and qwen 800 5e-4.

    python3 benchmarks/results/gpu_session18/cpu/qwen_shape/log_to_json.py /tmp/qs_siglip_lr5e-4.log siglip 800 5e-4
"""
import json
import re
import sys
from pathlib import Path

log, variant, steps, lr = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
pat = re.compile(r"step\s+(\d+) loss ([\d.]+) shape ([\d.]+) colour ([\d.]+) motion ([\d.]+) \((\d+) s\)")
curve = [dict(step=int(m[1]), loss=float(m[2]), shape=float(m[3]), colour=float(m[4]), motion=float(m[5]), seconds=float(m[6]))
         for m in map(pat.search, open(log)) if m]
out = Path(__file__).resolve().parent / f"qwen_shape_{variant}_{steps}_lr{lr:g}.json"
out.write_text(json.dumps({"variant": variant, "config": "h64_l2_p8_lr2e-3", "lr": lr, "steps": steps, "curve": curve,
                           "note": "rebuilt from the printed log (rounded as printed)"}, indent=1))
print(out)
