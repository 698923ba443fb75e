#!/bin/bash
# Issue 65's accuracy check of the bfloat16 training path: the demo pretraining recipe (run/flags/demo_pretrain.flags,
# 900 steps) in float32 (production: the step compiled whole with XLA) and in bfloat16 with TensorFlow's fusible-only
# auto-clustering (--mixed_precision=bfloat16 --nojit_compile --xla_clustering=fusible), on the same records and seed;
# each run's held-out loss is in <work>/<float32|bfloat16>/eval_results.json. Usage (from the repository root):
#   bash bench/speed/bf16_training_accuracy.sh WORK_DIR
set -e
D=${1:?usage: bf16_training_accuracy.sh WORK_DIR}
PY=${PYTHON:-python}
DATA="--seq_len=128 --reuse_len=64 --num_predict=21 --perm_size=32 --bi_data=true --global_batch_size=8 --num_replicas=1"
mkdir -p "$D"
[ -f "$D/spiece.model" ] || $PY tfrecords/spm.py --input_glob=data/demo/train.txt --model_prefix="$D/spiece" --vocab_size=4000
[ -f "$D/train_records/manifest.json" ] || $PY tfrecords/build_pretrain.py --input_glob=data/demo/train.txt \
  --spiece_model="$D/spiece.model" --output_dir="$D/train_records" --num_shards=2 --num_processes=2 $DATA
[ -f "$D/heldout_records/manifest.json" ] || $PY tfrecords/build_pretrain.py --input_glob=data/demo/heldout.txt \
  --spiece_model="$D/spiece.model" --output_dir="$D/heldout_records" --split=heldout $DATA
COMMON="--flagfile=run/flags/demo_pretrain.flags --record_dir=$D/train_records --eval_records_dir=$D/heldout_records --spiece_model=$D/spiece.model"
$PY run/pretrain.py $COMMON --model_dir="$D/float32" > "$D/float32.log" 2>&1
$PY run/pretrain.py $COMMON --model_dir="$D/bfloat16" --mixed_precision=bfloat16 --nojit_compile \
  --xla_clustering=fusible > "$D/bfloat16.log" 2>&1
$PY - "$D" <<'PYEOF'
import json, sys
d = sys.argv[1]
runs = {k: [e for e in json.load(open(f"{d}/{k}/eval_results.json"))["evaluations"]] for k in ("float32", "bfloat16")}
for (a, b) in zip(runs["float32"], runs["bfloat16"]):
    print(f"step {a['step']}: held-out loss float32 {a['loss']:.4f} bfloat16 {b['loss']:.4f} "
          f"({100 * (b['loss'] - a['loss']) / a['loss']:+.2f}%)")
PYEOF
