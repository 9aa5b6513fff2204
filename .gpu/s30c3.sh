# session 30, call 3 (fresh machine, ~360 s of device time left): how far the Qwen2.5-VL tower's shape probe goes with
# more steps or a wider tower. Call 2 (s30c1.sh, RESULTS 36.2) gave a target whose motion is right and whose shapes are
# not (teacher-forced shape 0.76, object precision 0.78); its tower (h128, 3000 steps, as in s28c1.sh) read shape at
# 0.868 in its pretraining probe. Two pretraining runs side by side on the one GPU, each its own process:
#   h128 (the release tower) for 8000 steps, and h256 (8 heads) for 6000, both with a curve every 1000 steps.
source .gpu/setup.sh; date
run() {  # name config steps
  python3 benchmarks/vision_learnability.py --configs "$2" --steps "$3" --device cuda --family qwen2.5-vl \
    --lm-hidden 96 --workers 8 --train 20000 --test 2000 --every 1000 --out "$OUT/$1" 2>&1 | tee "$OUT/$1.log"
}
run qwen_h128_8000 h128_l4_p8_lr5e-4_b128_n4 8000 &
run qwen_h256_6000 h256_l4_p8_lr3e-4_b128_n8 6000 &
wait
date
