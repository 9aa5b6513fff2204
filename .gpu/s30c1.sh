# template, session 29 (for the next session lent a machine). Calls 1 (fresh machine) and 2 (warm, within 30 s of
# call 1's return): the Qwen2.5-VL release pair of s29c1.sh with the width band the language model can use.
# RESULTS 35: with M-RoPE thirds the 16 x 96 target never learnt motion (35.1); bands [2, 2, 20] at base 10000 give
# width a top frequency of 0.22 rad, which a 2-layer LM on the same tower's tokens learnt in one run and not in
# another (35.2), and the SFT did not learn motion with it in 2400 steps (35.3); at base 100 the width band starts at
# 0.46 rad and the LM learnt motion in 500 steps in its one run. LR 1e-3: session 19's Qwen target (26.2) learnt some
# motion in its captions at that LR and not at 5e-4 (27.1), and 35.3's ran at 6e-4.
# After this was written, RESULTS 35.5 found that with the query ~20 text tokens after the video (where a caption's
# motion word is), M-RoPE needs depth. With these bands, 2 layers stay at ~0.37, 4 layers reach 0.71 and 16 layers
# (this target's depth) 1.00 by step 600. 1-D positions learn it with 2 layers. Thirds at 16
# layers reach 0.88 by step 800 (36.1): the bands speed it up, they are not needed at that depth.
#   call 1: STOP_AFTER=sft bash .gpu/s30c1.sh   SynthVid, the Qwen tower, the draft VLM (background), the SFT (2400
#                                               steps, ~400 s in call 3 of session 29) and its export (stages/)
#   call 2: bash .gpu/s30c1.sh                  the MCQ fine-tune (800 steps), Sparrow, figures (~300 s)
# Then, on CPU, the figures of data/releases/README.md for the fine-tune and the first stage, and
# `python benchmarks/mcq_teacher_forced.py --type motion --probe` on both; commit the pair only if the target meets
# both release bars (releases <= ~30 MB; tests/test_repo_budget.py).
# Ran in session 30 (461 s fresh, then 302 s warm; RESULTS 36.2): motion learnt (caption motion precision 0.88,
# teacher-forced 0.98), shapes not (teacher-forced 0.76, the tower's probe 0.868): precision 0.885, MCQ 0.880, both
# bars missed. The next plan is s31c1.sh (a tower that reads shapes better, a longer SFT).
RUN=${RUN:-r30-qwen} LR=${LR:-1.0e-3} \
  TARGET_EXTRA=${TARGET_EXTRA:-"--model.init_args.arch.num_layers 16 --model.init_args.arch.hidden_size 96 --model.init_args.arch.num_heads 2 --model.init_args.arch.num_kv_heads 2 --model.init_args.arch.mrope_section [2,2,20] --model.init_args.arch.rope_theta 100"} \
  bash .gpu/s29c1.sh
