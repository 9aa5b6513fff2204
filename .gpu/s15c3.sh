# template, session 15 call 4, only if ~450 s of device time are left after s15c2.sh (warm, within 30 s): issue 4's
# release-size target, which has never been trained on the GPU with the frozen pretrained tower (RESULTS 6 and 2: the
# committed one was continued on CPU, 0.66 / 0.87 against the bars 0.95 / 0.9). PROFILE=release (6 layers, 4.2M
# parameters, 2400 steps in 3:30), the committed draft VLM reused, the SynthVid set of call 1 reused (same seed and
# arguments). The exported target (~17 MB in fp32) comes back in 15 MB parts:
#   cat r15-releases.tgz.part-* | tar xzf - -C runs/r15   (then compare figures.json with data/releases' cards)
test -f runs/h15/synthvid/synthvid.json || { echo "NO DATA: machine restarted"; exit 3; }
source .gpu/setup.sh; date
R=$PWD/runs/r15; X=$OUT/x15r; mkdir -p $X $R
OUT=$R PROFILE=release DATA=$PWD/runs/h15/synthvid DRAFT=$PWD/data/releases/synthvid-draft WORKERS=12 EVAL_LIMIT=40 \
  VIDSPEC=vidspec PY=python3 timeout ${LIMIT:-540} bash benchmarks/train_releases_gpu.sh > $X/train.log 2>&1
echo "train rc $?" >> $X/train.log
date; grep -v -i warn $X/train.log | grep -E "^==|rc |precision|accuracy|tau|^   [0-9]+ s" | tail -20
cp $R/figures.json $OUT/ 2>/dev/null
cd $R && tar czf - releases/synthvid-target releases/sparrow-synthvid | split -b 15m - $OUT/r15-releases.tgz.part-
tar czf $OUT/r15runs.tgz --exclude='*.ckpt' --exclude='*.safetensors' --exclude='events.out*' runs vision/*.json 2>/dev/null; ls -la $OUT
