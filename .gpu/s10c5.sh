# session 10, call 5 (fresh, one H200, ~350 s of budget left): the engine at both 7B shapes with the BUILT-IN gemv
# table (no VIDSPEC_GEMV_TABLE), then every GPU test. Timeouts 90 + 200 = 290 s. Logs straight into $OUT (few files).
source .gpu/s4setup.sh > $OUT/setup.log 2>&1; date; T0=$(date +%s)
unset VIDSPEC_GEMV_TABLE
timeout 90 python3 benchmarks/engine_gpu.py --families qwen2.5-vl,llava-ov --contexts 2048 --skip-hf \
  --no-draft --no-e2e --variants fused,gemv --gemv-verify --reps 30 --out $OUT/engine 2>&1 | grep -v -i warn > $OUT/engine.log
echo "engine rc ${PIPESTATUS[0]} at $(( $(date +%s) - T0 )) s (built-in table)" >> $OUT/engine.log; tail -n 12 $OUT/engine.log
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu packages tests > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $? at $(( $(date +%s) - T0 )) s" >> $OUT/gpu_tests.log; tail -n 15 $OUT/gpu_tests.log
