# session 29. Calls 1 (fresh machine) and 2 (warm, within 30 s of call 1's return): the Qwen2.5-VL release pair of
# s28c1.sh with the target's M-RoPE bands set to [2, 2, 20] (temporal, height, width) instead of thirds ([8, 8, 8]).
# Session 29's s28c1.sh run (RESULTS 35.1) gave a 16 x 96 target that could not tell where an object moves (moving
# objects "slide left" or "slide right"; MCQ motion 0.50, precision 0.73). benchmarks/qwen_mrope_motion.py showed
# why: at a head of 48 the thirds leave height and width frequencies under 0.05 rad a token. A 2-layer Qwen LM on the
# same tower's tokens learnt motion to 0.35 with thirds and to 0.98-0.99 with [2, 2, 20] or 1-D positions (35.2).
#   call 1: STOP_AFTER=sft bash .gpu/s29c1.sh   SynthVid, the Qwen tower, the draft VLM (background), the whole SFT
#                                               (2400 steps) and its export (stages/)
#   call 2: bash .gpu/s29c1.sh                  the MCQ fine-tune (800 steps), Sparrow, figures (~300 s)
# Ran in session 29: call 1 only (554 s; the SFT 376 s, 0.157 s a step). No budget was left for call 2. That
# target learnt no motion either (35.3). The next plan is s30c1.sh, which runs this script with other bands, base
# and LR.
RUN=${RUN:-r29-qwen} TARGET_CALL_STEPS=${TARGET_CALL_STEPS:-2400} \
  TARGET_EXTRA=${TARGET_EXTRA:-"--model.init_args.arch.num_layers 16 --model.init_args.arch.hidden_size 96 --model.init_args.arch.num_heads 2 --model.init_args.arch.num_kv_heads 2 --model.init_args.arch.mrope_section [2,2,20]"} \
  bash .gpu/s28c1.sh
