# session 29. Calls 1 (fresh machine) and 2 (warm, within 30 s of call 1's return): the Qwen2.5-VL release pair of
# s28c1.sh with the target's M-RoPE bands set to [2, 2, 20] (temporal, height, width) instead of thirds ([8, 8, 8]).
# Session 29's first s28c1.sh run (RESULTS 35.1) showed the 16 x 96 target could not tell left from right (every
# moving object "slides left"; MCQ motion 0.56, precision 0.73); benchmarks/qwen_mrope_motion.py then showed why:
# at a head of 48 the thirds leave height and width frequencies under 0.05 rad a token, and a 2-layer Qwen LM on the
# same tower's tokens learns motion to 0.35 with thirds and to 0.99 with [2, 2, 20] or 1-D positions.
#   call 1: STOP_AFTER=sft bash .gpu/s29c1.sh   SynthVid, the Qwen tower, the draft VLM (background), the whole SFT
#                                               (2400 steps, ~0.125 s a step in RESULTS 35.1) and its export (stages/)
#   call 2: bash .gpu/s29c1.sh                  the MCQ fine-tune (800 steps), Sparrow, figures (~300 s)
# If no warm call 2 fits, the fine-tune and Sparrow can run on CPU from stages/synthvid-target-sft (RESULTS 34.1).
RUN=${RUN:-r29-qwen} TARGET_CALL_STEPS=${TARGET_CALL_STEPS:-2400} \
  TARGET_EXTRA=${TARGET_EXTRA:-"--model.init_args.arch.num_layers 16 --model.init_args.arch.hidden_size 96 --model.init_args.arch.num_heads 2 --model.init_args.arch.num_kv_heads 2 --model.init_args.arch.mrope_section [2,2,20]"} \
  bash .gpu/s28c1.sh
