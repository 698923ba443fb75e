"""The classification, SQuAD, RACE and tagging builders on a Beam runner: one build per element.

Those builders write ONE record file per split, in a seeded order over the whole split
(train shuffled, eval padded to a multiple of the eval batch), from data sets of at most
a few hundred thousand examples (minutes on one core). Splitting one split's examples
across workers would need a global sort before a single writer, for little gain, so the
natural unit of parallelism is one build (one task, all its splits, one output_dir):
e.g. every GLUE task, SQuAD and RACE in one pipeline.

A job is one command line of the existing CLIs, without the program name:

    classifier --task=mrpc --data_dir=glue/MRPC --spiece_model=sp.model --output_dir=out/mrpc
    squad --train_file=train-v2.0.json --predict_file=dev-v2.0.json --spiece_model=sp.model \
        --output_dir=out/squad2
    race --data_dir=RACE --spiece_model=sp.model --output_dir=out/race
    tagging --data_dir=conll2003 --spiece_model=sp.model --output_dir=out/ner --splits=train,dev,test

and runs as `python -m tfrecords.build_<builder> <flags>` in a subprocess on a worker: the
very code and flags of the local CLI (its own absl flags, `--flagfile` included), so the
files are those of the local build. A failing job (non-zero exit) fails the pipeline with
the CLI's error message. Paths must be visible to the workers (local for the
DirectRunner, or a shared mount); each job needs its own `--output_dir`.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
import sys
import time
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import apache_beam as beam

from tfrecords.beam import pretrain_pipeline

BUILDERS = ("classifier", "squad", "race", "tagging")
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class JobError(RuntimeError):
    """A build job failed; the message holds the builder's own error."""


@dataclasses.dataclass(frozen=True)
class Job:
    index: int
    builder: str
    args: Tuple[str, ...]
    output_dir: str

    def command(self) -> List[str]:
        return [sys.executable, "-m", f"tfrecords.build_{self.builder}", *self.args]

    def __str__(self) -> str:
        return f"job {self.index} ({self.builder} {' '.join(map(shlex.quote, self.args))})"


def _flag_value(args: Sequence[str], name: str) -> Optional[str]:
    for k, a in enumerate(args):
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
        if a == f"--{name}" and k + 1 < len(args):
            return args[k + 1]
    return None


def parse_jobs(lines: Iterable[str]) -> List[Job]:
    """Job lines (`<builder> <flags...>`, shell quoting, `#` comments, `\\` continuations)
    -> jobs. ValueError for an unknown builder, a missing or shared `--output_dir`."""
    text = "\n".join(lines).replace("\\\n", " ")
    jobs: List[Job] = []
    seen: Dict[str, int] = {}
    for line in text.split("\n"):
        words = shlex.split(line, comments=True)
        if not words:
            continue
        builder, args = words[0], tuple(words[1:])
        if builder not in BUILDERS:
            raise ValueError(f"job line {line.strip()!r}: builder must be one of "
                             f"{', '.join(BUILDERS)} (pretraining: tfrecords.beam.build_pretrain)")
        out = _flag_value(args, "output_dir")
        if not out and not any(a.startswith("--flagfile") for a in args):
            raise ValueError(f"job line {line.strip()!r}: no --output_dir")
        if out:
            key = os.path.abspath(out)
            if key in seen:
                raise ValueError(f"jobs {seen[key]} and {len(jobs)} both write {out}: the "
                                 "manifest of one output_dir is written by one build")
            seen[key] = len(jobs)
        jobs.append(Job(len(jobs), builder, args, out or ""))
    if not jobs:
        raise ValueError("no jobs")
    return jobs


class RunJobFn(beam.DoFn):
    """One job -> the local CLI in a subprocess -> `{index, builder, output_dir, seconds,
    log}`; raises JobError on failure."""

    def __init__(self, cwd: str):
        self._cwd = cwd

    def process(self, job: Job):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_REPO_ROOT, env.get("PYTHONPATH"))
                                            if p)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        cwd = self._cwd if os.path.isdir(self._cwd) else None
        t0 = time.time()
        proc = subprocess.run(job.command(), cwd=cwd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr.strip() or proc.stdout.strip())[-2000:]
            raise JobError(f"{job} failed with exit code {proc.returncode}: {tail}")
        beam.metrics.Metrics.counter("xlnet_downstream", f"{job.builder}_builds").inc()
        yield {"index": job.index, "builder": job.builder, "output_dir": job.output_dir,
               "seconds": round(time.time() - t0, 3), "log": proc.stdout[-4000:]}


def run_jobs(jobs: Sequence[Job], *, runner: str = "DirectRunner",
             beam_args: Sequence[str] = (), num_processes: int = 1, log=print) -> None:
    """Run the jobs on a Beam runner; raises (after the runner's retries) if one fails."""
    log = log or (lambda s: None)
    options = pretrain_pipeline.pipeline_options(runner, beam_args, num_processes)
    log(f"{len(jobs)} build job(s) on {runner}")
    t0 = time.time()
    p = beam.Pipeline(runner=pretrain_pipeline.make_runner(runner, options), options=options)
    _ = (p
         | "Jobs" >> beam.Create(list(jobs))
         | "Spread" >> beam.Reshuffle()
         | "Build" >> beam.ParDo(RunJobFn(os.getcwd())))
    state = p.run().wait_until_finish()
    if state is not None and str(state).upper().rsplit(".", 1)[-1] != "DONE":
        raise JobError(f"pipeline ended in state {state}")
    for job in jobs:
        log(f"done: {job.builder} -> {job.output_dir}")
    log(f"{len(jobs)} job(s) in {time.time() - t0:.1f}s")
