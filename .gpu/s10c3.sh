# session 10, call 3 (issue 8: split-K GEMV for verify steps; fresh or warm, one H200): sweep -> table -> engine at
# the Qwen shape, 2k context, with the table -> the gemv / split-K tests. Timeouts 150 + 170 + 95 = 415 s (< 420).
source .gpu/s4setup.sh; date; T0=$(date +%s)
X=$OUT/s10c3; mkdir -p $X
timeout 150 python3 benchmarks/gemv_sweep_gpu.py $X --table-out $X/gemv_table.json --rows 1,9 --budget-s 100 \
  2>&1 | tee $X/sweep.log; echo "sweep rc ${PIPESTATUS[0]} at $(( $(date +%s) - T0 )) s" | tee -a $X/sweep.log
TAB=""; [ -f $X/gemv_table.json ] && TAB=$X/gemv_table.json
VIDSPEC_GEMV_TABLE=$TAB timeout 170 python3 benchmarks/engine_gpu.py --families qwen2.5-vl --contexts 2048 --skip-hf \
  --no-draft --no-e2e --variants fused,gemv --gemv-verify --reps 30 --out $X/engine 2>&1 | grep -v -i warn | tee $X/engine.log
echo "engine rc ${PIPESTATUS[0]} at $(( $(date +%s) - T0 )) s (table: ${TAB:-none})" | tee -a $X/engine.log
timeout 95 python3 -m pytest -q -p no:cacheprovider packages/decoding/tests/test_fast_kernels.py \
  packages/decoding/tests/test_fast_gpu.py -k "gemv or small or split" > $X/tests.log 2>&1
echo "tests rc $? at $(( $(date +%s) - T0 )) s" >> $X/tests.log; tail -n 25 $X/tests.log
date; ls -la $X
