# template, session 30 (written for a third call; new loans were paused, so it did not run; ~300 s of work): how
# far the Qwen2.5-VL tower's shape probe goes with more steps, more scenes or a wider tower. Call 2 (s30c1.sh,
# RESULTS 36.2) gave a target whose motion is right and whose shapes are not (teacher-forced shape 0.76, object
# precision 0.78); its tower (h128, 3000 steps on 20,000 scenes, as in s28c1.sh) read shape at 0.868 in its
# pretraining probe, with its loss still falling (0.38 at step 2000, 0.14 at 3000). Pretraining runs side by side on
# the one GPU, each its own process, with a curve every 1000 steps:
#   h128 (the release tower) for 8000 steps on 20,000 scenes, and on 60,000 (does it overfit its scenes?);
#   h256 (8 heads) for 6000 steps: is width the cap? Only h128 fits a release: with h256 the 16 x 96 target is 12.8 MB
#   in bfloat16 against h128's 7.1 MB, and data/releases/ has 9.5 of its ~30 MB left for the whole Qwen pair
#   (session 31, RESULTS 37). If h256 alone reads shapes well, the pair cannot be released at this budget.
# (Session 31 replaced a third run, h128 into a 192-wide merger: the target's LM cannot widen to 192 within the budget.)
source .gpu/setup.sh; date
run() {  # name config steps training-scenes
  python3 benchmarks/vision_learnability.py --configs "$2" --steps "$3" --device cuda --family qwen2.5-vl \
    --lm-hidden 96 --workers 5 --train "$4" --test 2000 --every 1000 --out "$OUT/$1" 2>&1 | tee "$OUT/$1.log"
}
run qwen_h128_8000 h128_l4_p8_lr5e-4_b128_n4 8000 20000 &
run qwen_h128_8000_t60k h128_l4_p8_lr5e-4_b128_n4 8000 60000 &
run qwen_h256_6000 h256_l4_p8_lr3e-4_b128_n8 6000 20000 &
wait
date
