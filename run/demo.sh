#!/usr/bin/env bash
# The main job, end to end on the embedded public-domain demo corpus (CPU, a few minutes):
# install -> SentencePiece model -> pretraining records (baked permutations) -> pretrain a small XLNet
# -> held-out permutation-LM loss before and after. Outputs go to $DEMO_DIR (default demo_output/).
set -euo pipefail
cd "$(dirname "$0")/.."
DEMO_DIR=${DEMO_DIR:-demo_output}
PY=${PYTHON:-.venv/bin/python}
if [ ! -x "$PY" ]; then
  python3 -m venv .venv
  .venv/bin/pip install -q -r requirements.txt
  PY=.venv/bin/python
fi
# the packages themselves (pyproject.toml), editable, if this environment lacks them
"$PY" -I -c "import xlnet_tf, tfrecords, run" 2>/dev/null || "$PY" -m pip install -q --no-deps -e .
export TF_CPP_MIN_LOG_LEVEL=2
# Progress reaches a log file as it happens: Python writes unbuffered into the filter's pipe, and the filter
# passes each line on at once (grep block-buffers when its output is not a terminal).
export PYTHONUNBUFFERED=1
# TensorFlow prints start-up noise (CUDA probing, oneDNN) before its log level applies; drop it.
quiet() {
  "$@" 2>&1 | { grep --line-buffered -v -E "^(I|W|E)[0-9]{4} |^WARNING: All log messages|rebuild TensorFlow" || true; }
}
mkdir -p "$DEMO_DIR"
DATA="--seq_len=128 --reuse_len=64 --num_predict=21 --perm_size=32 --bi_data=true --global_batch_size=8 --num_replicas=1"
quiet "$PY" tfrecords/spm.py --input_glob=data/demo/train.txt --model_prefix="$DEMO_DIR/spiece" --vocab_size=4000
quiet "$PY" tfrecords/build_pretrain.py --input_glob=data/demo/train.txt --spiece_model="$DEMO_DIR/spiece.model" \
  --output_dir="$DEMO_DIR/train_records" --num_shards=2 --num_processes=2 $DATA
quiet "$PY" tfrecords/build_pretrain.py --input_glob=data/demo/heldout.txt --spiece_model="$DEMO_DIR/spiece.model" \
  --output_dir="$DEMO_DIR/heldout_records" --split=heldout $DATA
quiet "$PY" run/pretrain.py --flagfile=run/flags/demo_pretrain.flags --record_dir="$DEMO_DIR/train_records" \
  --eval_records_dir="$DEMO_DIR/heldout_records" --spiece_model="$DEMO_DIR/spiece.model" \
  --model_dir="$DEMO_DIR/model"
