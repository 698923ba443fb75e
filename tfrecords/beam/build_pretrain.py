"""Build XLNet pretraining records on an Apache Beam runner (same files as
`tfrecords/build_pretrain.py`, byte for byte).

  python -m tfrecords.beam.build_pretrain --input_glob='../shared/data/corpus/train/*.txt' \
      --spiece_model=spiece.model --output_dir=records/ --seq_len=512 --reuse_len=256 \
      --num_predict=85 --perm_size=256 --global_batch_size=16 --num_shards=16 \
      --runner=DirectRunner --num_processes=2

  python -m tfrecords.beam.build_pretrain --input_glob='gs://b/corpus/*.txt' \
      --spiece_model=gs://b/spiece.model --output_dir=gs://b/records --num_shards=1024 \
      --runner=DataflowRunner -- --project=P --region=R --temp_location=gs://b/tmp \
      --sdk_container_image=IMAGE

The flags are those of `tfrecords/build_pretrain.py` plus `--runner`; everything after
`--` is passed to Beam as pipeline options. `--num_processes=N` runs the DirectRunner with
N worker processes; `--task_id/--num_tasks` do not apply (the runner schedules the shards).
A rerun skips finished shards. Needs `pip install -r requirements-beam.txt`.
"""

from __future__ import annotations

import os

from absl import app, flags

from tfrecords import build_pretrain as local_cli
from xlnet_tf import cli

FLAGS = flags.FLAGS


def define_flags():
    local_cli.define_flags()
    flags.DEFINE_string("runner", "DirectRunner", "Beam runner: DirectRunner (local), "
                        "DataflowRunner, FlinkRunner, SparkRunner, PortableRunner, ... "
                        "Pipeline options for it go after `--`.")


def main(argv):
    beam_args = argv[1:]
    if beam_args and not all(a.startswith("-") for a in beam_args):
        raise app.UsageError(f"unexpected arguments: {beam_args} (Beam pipeline options go "
                             "after `--`, each as --name=value)")
    if FLAGS.num_tasks != 1 or FLAGS.task_id != 0:
        raise app.UsageError("--num_tasks/--task_id split a build by hand between machines; "
                             "with Beam the runner schedules the shards: drop them")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tfrecords.beam import pretrain_pipeline

    pretrain_pipeline.build_pretrain_records_beam(
        FLAGS.input_glob, FLAGS.spiece_model, FLAGS.output_dir,
        local_cli.config_from_flags(), runner=FLAGS.runner, beam_args=beam_args,
        num_processes=FLAGS.num_processes, log_every_s=FLAGS.log_every_s,
        log=lambda s: print(s, flush=True))
    return 0


if __name__ == "__main__":
    define_flags()
    cli.run(main, errors=(ValueError,))  # BuildError, DataError, CorpusError, bad arguments: one line
