#!/bin/bash
# Issue 65's accuracy check of a bfloat16 export: the CPU recipe's PLM (../shared/models/plm_cpu) fine-tuned on the
# shared topic set with the transfer table's recipe (bench/studies/transfer/flags/transfer_topic.flags), exported in
# float32 and with --export_dtype=bfloat16, both exports' predictions on the shipped slice (data/finetune/topic/dev.tsv)
# and the whole shared dev and test sets, compared (bench/speed/bf16_export_compare.py). Usage (repository root):
#   bash bench/speed/bf16_export_accuracy.sh WORK_DIR [PLM_DIR [TOPIC_DIR]]
set -e
D=${1:?usage: bf16_export_accuracy.sh WORK_DIR [PLM_DIR [TOPIC_DIR]]}
PLM=${2:-../shared/models/plm_cpu}
TOPIC=${3:-../shared/data/labeled/topic}
PY=${PYTHON:-python}
mkdir -p "$D"
[ -f "$D/model/export_info.json" ] || $PY run/run_classifier.py --flagfile=bench/studies/transfer/flags/transfer_topic.flags \
  --data_dir="$TOPIC" --record_dir="$D/records" --model_dir="$D/model" --spiece_model_file="$PLM/spiece.model" \
  --model_config_path="$PLM/xlnet_config.json" --init_checkpoint="$PLM/final" > "$D/finetune.log" 2>&1
for dtype in float32 bfloat16; do
  [ -d "$D/export_$dtype/1" ] || $PY run/export_savedmodel.py --model_dir="$D/model" --export_dir="$D/export_$dtype" \
    --export_dtype=$dtype > "$D/export_$dtype.log" 2>&1
done
$PY -m bench.speed.bf16_export_compare --float32="$D/export_float32/1" --bfloat16="$D/export_bfloat16/1" \
  --tsv=data/finetune/topic/dev.tsv,"$TOPIC/dev.tsv","$TOPIC/test.tsv" --output="$D/compare"
