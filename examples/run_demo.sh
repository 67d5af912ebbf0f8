#!/usr/bin/env bash
# The example pipeline `make demo` runs: generate a text corpus (no downloads), then clean it,
# split it, train on the split (examples/train.py) and describe it, each as a TorchX job on the
# local_cwd scheduler.
set -euo pipefail
cd "$(dirname "$0")/.."

DATA=${DEMO_DATA:-demo-data}
OUT=${DEMO_OUT:-demo-out}
N=${DEMO_N:-50000}
STEPS=" ${DEMO_STEPS:-transform split train stats} "  # run only some: DEMO_STEPS=transform
step() { [[ "$STEPS" == *" $1 "* ]]; }

if [ ! -f "$DATA/part-00000.jsonl" ]; then
  python examples/gen_corpus.py --n "$N" --k 4 --out "$DATA"
fi

# --cache memoizes tokenize per record in a node-local sqlite file: run `make demo` twice and
# the second transform computes nothing (the summary below shows the hits).
mkdir -p "$OUT"
OUT_ABS=$(cd "$OUT" && pwd)
if step transform; then
  echo "== transform: clean and tokenize $DATA/*.jsonl"
  torchx run -s local_cwd torchx_datapipes.components:transform \
    --fn examples/transforms.py:tokenize --input "$DATA/*.jsonl" --output "$OUT/clean" \
    -j 1x2 --on_error skip --overwrite True --cache "sqlite://$OUT_ABS/cache.db?namespace=demo"
fi

if step split; then
  echo "== split: train/val/test by id"
  torchx run -s local_cwd torchx_datapipes.components:split \
    --input "$OUT/clean/part-*.jsonl" --output "$OUT/split" \
    --fractions train=0.8,val=0.1,test=0.1 --key id -j 1x2 --overwrite True
fi

if step train; then
  echo "== train: read the train split under DDP (2 ranks x 2 DataLoader workers, 2 epochs)"
  torchx run -s local_cwd dist.ddp -j 1x2 --script examples/train.py -- --data "$OUT/split"
fi

if step stats; then
  echo "== stats: summary statistics and report"
  torchx run -s local_cwd torchx_datapipes.components:stats \
    --input "$OUT/clean/part-*.jsonl" --output "$OUT/stats" -j 1x2 --overwrite True
fi

echo
echo "output:   $OUT/clean/part-*.jsonl"
echo "manifest: $OUT/clean/_SUCCESS"
python - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
m = json.load(open(os.path.join(out, "clean", "_SUCCESS")))
print(f"records in {m['records_in']:,}, out {m['records_out']:,}, filtered {m['filtered']:,}, bad {m['bad']:,},"
      f" world size {m['world_size']}, {m['wall_time_s']:.2f}s in the runner")
c = m.get("cache")
if c:
    print(f"cache {c['url']}: {c['hits']:,} hits, {c['misses']:,} misses, {c['errors']:,} errors")
for sub, what in (("split", "splits"), ("stats", "report")):
    if os.path.exists(os.path.join(out, sub, "_SUCCESS")):
        if sub == "split":
            print("splits:", json.load(open(os.path.join(out, sub, "_SUCCESS"))).get("splits"))
        else:
            print("report:", os.path.join(out, sub, "report.html"))
PY
