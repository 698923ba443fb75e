"""Build classification / SQuAD / RACE / tagging records for many tasks at once on a Beam runner.

  python -m tfrecords.beam.build_downstream --jobs=jobs.txt --num_processes=2

`jobs.txt`: one build per line, `<classifier|squad|race|tagging> <flags of tfrecords/build_<x>.py>`
(see `tfrecords/beam/downstream_pipeline.py`). `--runner` picks the Beam runner; Beam
pipeline options go after `--`. Each job gives the files of the local CLI.
"""

from __future__ import annotations

from absl import app, flags

from xlnet_tf import cli

FLAGS = flags.FLAGS


def define_flags():
    flags.DEFINE_string("jobs", None, "File of build jobs, one `<builder> <flags>` a line.")
    flags.DEFINE_string("runner", "DirectRunner", "Beam runner; its options go after `--`.")
    flags.DEFINE_integer("num_processes", 1, "DirectRunner worker processes.", lower_bound=1)
    flags.mark_flags_as_required(["jobs"])


def main(argv):
    beam_args = argv[1:]
    if beam_args and not all(a.startswith("-") for a in beam_args):
        raise app.UsageError(f"unexpected arguments: {beam_args} (Beam pipeline options go "
                             "after `--`)")
    from tfrecords.beam import downstream_pipeline

    try:
        with open(FLAGS.jobs, encoding="utf-8") as f:
            jobs = downstream_pipeline.parse_jobs(f.read().splitlines())
        downstream_pipeline.run_jobs(jobs, runner=FLAGS.runner, beam_args=beam_args,
                                     num_processes=FLAGS.num_processes,
                                     log=lambda s: print(s, flush=True))
    except (OSError, ValueError, downstream_pipeline.JobError) as e:
        cli.report_user_error(e)
    return 0


if __name__ == "__main__":
    define_flags()
    cli.run(main)
