# template, session 30 (written for a third call; new loans were paused, so it did not run; ~270 s of work): how
# far the Qwen2.5-VL tower's shape probe goes with more steps or a wider tower. Call 2 (s30c1.sh, RESULTS 36.2)
# gave a target whose motion is right and whose shapes are not (teacher-forced shape 0.76, object precision 0.78);
# its tower (h128, 3000 steps, as in s28c1.sh) read shape at
# 0.868 in its pretraining probe. Pretraining runs side by side on the one GPU, each its own process:
#   h128 (the release tower) for 8000 steps, and h256 (8 heads) for 6000, both with a curve every 1000 steps.
# A third process asks whether the merger's output width caps shape: sessions 18-20's Qwen towers projected into a
# 192-wide LM and read shape at 0.928 after 3000 steps (RESULTS 25.2), this target's into 96 and read 0.868. The
# same h128 tower into 192 for 3000 steps (same seed and data as 36.2's 0.868) says whether the width is the cap.
source .gpu/setup.sh; date
run() {  # name config steps lm-hidden
  python3 benchmarks/vision_learnability.py --configs "$2" --steps "$3" --device cuda --family qwen2.5-vl \
    --lm-hidden "$4" --workers 5 --train 20000 --test 2000 --every 1000 --out "$OUT/$1" 2>&1 | tee "$OUT/$1.log"
}
run qwen_h128_8000 h128_l4_p8_lr5e-4_b128_n4 8000 96 &
run qwen_h256_6000 h256_l4_p8_lr3e-4_b128_n8 6000 96 &
run qwen_h128_3000_lm192 h128_l4_p8_lr5e-4_b128_n4 3000 192 &
wait
date
