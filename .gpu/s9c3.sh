# session 9, call 3 (warm after call 2): every GPU test, then the device-vs-host round sweep on the new testbed.
test -f runs/h10/releases/synthvid-target/manifest.json || { echo "NO TARGET: machine restarted"; exit 3; }
source .gpu/s4setup.sh; date; T0=$(date +%s)
H=$PWD/runs/h10; X=$PWD/runs/x10
timeout 250 python3 -m pytest -m gpu -q -p no:cacheprovider packages tests > $X/tests.log 2>&1; echo "tests rc $?" >> $X/tests.log
left=$(( 540 - ($(date +%s) - T0) )); echo "rounds get $left s" > $X/rounds.log
timeout $left python3 benchmarks/device_rounds_gpu.py --target $H/releases/synthvid-target --sparrow $H/releases/sparrow-synthvid \
  --data $H/synthvid --limit 16 --k 8,12,16 --trees 48-8-8 --out $H/rounds >> $X/rounds.log 2>&1; echo "rounds rc $?" >> $X/rounds.log
date; tail -n 4 $X/tests.log; grep -v -i warn $X/rounds.log | tail -12
cd $X && tar czf $OUT/x10c.tgz . ; cd - >/dev/null
cd $H && tar czf $OUT/h10rounds.tgz rounds anatomy ; ls -la $OUT
