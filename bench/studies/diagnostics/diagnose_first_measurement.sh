#!/bin/bash
# Usage: WORK=<the transfer study's --work_dir> bash bench/studies/diagnostics/diagnose_first_measurement.sh (after
# its pretrain stage; uses the 900-step PLM checkpoint that run/flags/pretrain_cpu.flags keeps in
# $WORK/plm_model/kept/).
# Diagnosis of the transfer table's first null result: the first measurement's protocol on the shipped topic slice
# (1,500 train / 300 dev), run/flags/topic_demo.flags with the 4x256 models, 250 steps, batch 32.
cd "$(dirname "$0")/../../.."
export TF_CPP_MIN_LOG_LEVEL=2
WORK=${WORK:-bench_out/transfer}
D=$WORK/diag
mkdir -p $D
[ -f $D/demo/model/final/xlnet_model.ckpt.index ] || DEMO_DIR=$D/demo bash run/demo.sh > $D/demo.log 2>&1
ft() {  # name spiece config init lr
  out=$D/ft_$1
  [ -f $out/eval_results.json ] && return
  rm -rf $out
  .venv/bin/python run/run_classifier.py --flagfile=run/flags/topic_demo.flags \
    --record_dir=$D/records_$(basename $(dirname $2)) \
    --model_dir=$out --spiece_model_file=$2 --model_config_path=$3 ${4:+--init_checkpoint=$4} --learning_rate=$5 \
    --train_steps=250 --save_steps=250 > $out.log 2>&1
  echo "$1: $(grep -o '"accuracy": [0-9.]*' $out/eval_results.json | tail -1)"
}
DEMO=$D/demo/model/final
ft demo_pretrained_3e-4 $D/demo/spiece.model $DEMO/xlnet_config.json $DEMO 3e-4
ft demo_scratch_3e-4 $D/demo/spiece.model $DEMO/xlnet_config.json "" 3e-4
ft demo_pretrained_1e-4 $D/demo/spiece.model $DEMO/xlnet_config.json $DEMO 1e-4
PLM=$WORK/plm_model/final
ft corpus_plm_3e-4 $WORK/spiece.model $PLM/xlnet_config.json $PLM 3e-4
ft corpus_scratch_3e-4 $WORK/spiece.model $PLM/xlnet_config.json "" 3e-4
ft corpus_plm_step900_3e-4 $WORK/spiece.model $PLM/xlnet_config.json $WORK/plm_model/kept/ckpt-900 3e-4
