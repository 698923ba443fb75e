"""The sidecar evaluator's bookkeeping: which checkpoints of a training run to evaluate, when to stop, and the
TF Serving versions of the best so far (run/lifecycle.py's `--mode=continuous_eval` runs it; the trainer runs on
its own, e.g. on a TPU, and only trains).

- `watch_checkpoints`: yields each checkpoint (`ckpt-N` of the model_dir) not evaluated yet, once, in step order,
  as they appear; stops once the run's final step is evaluated (`final_step`, or the step the trainer records in
  `TRAINING_DONE` when it finishes) or after `timeout` seconds without a new checkpoint. A restarted evaluator
  passes the steps already in eval_results.json: nothing is evaluated twice.
- `TRAINING_DONE`: `training_done.json` in the model_dir, `{"step": N}`, written by the trainer last.
- Export versions: `next_version` (one above the highest in the base directory), `exported_steps` (the step each
  version's provenance records), `keep_newest` (delete the oldest beyond `--exports_to_keep`).

Paths may be local or `gs://` (tf.io.gfile).
"""

from __future__ import annotations

import os
import time
from typing import Callable, Dict, Iterable, Iterator, Optional, Tuple

from xlnet_tf.artifacts.versioned_json import VersionedJson

TRAINING_DONE = "training_done.json"
PROVENANCE = "xlnet_best.json"  # in a version's assets.extra/: the checkpoint, step and metric it was exported for
DONE_FILE = VersionedJson("xlnet_tf.training_done", 1, "re-run the trainer (it writes the file when it finishes)")
PROVENANCE_FILE = VersionedJson("xlnet_tf.export_provenance", 1, "export the version again")


def _gfile():
    import tensorflow as tf

    return tf.io.gfile


def training_done_step(model_dir: str) -> Optional[int]:
    """The final step the trainer recorded when it finished, or None while it has not."""
    path = os.path.join(model_dir, TRAINING_DONE)
    if not _gfile().exists(path):
        return None
    return int(DONE_FILE.read(path)["step"])


def write_training_done(model_dir: str, step: int) -> None:
    DONE_FILE.write(os.path.join(model_dir, TRAINING_DONE), {"step": int(step)})


def watch_checkpoints(model_dir: str, list_checkpoints: Callable[[str], Iterable[str]],
                      step_of: Callable[[str], int], evaluated: Iterable[int], final_step: Optional[int],
                      poll_seconds: float, timeout_seconds: float, log: Callable[[str], None] = print,
                      sleep: Callable[[float], None] = time.sleep,
                      clock: Callable[[], float] = time.monotonic) -> Iterator[str]:
    """Yields the path of every checkpoint of `model_dir` whose step is not in `evaluated`, in step order, as it
    appears (the caller evaluates it before asking for the next); returns when the final step (the smaller of
    `final_step` and the trainer's `TRAINING_DONE` step) has been evaluated, or `timeout_seconds` after the last new
    checkpoint."""
    done = set(int(s) for s in evaluated)
    last_new = clock()
    while True:
        finished = training_done_step(model_dir)
        final = min(s for s in (final_step, finished) if s is not None) if (final_step or finished) else None
        if final is not None and any(s >= final for s in done):
            log(f"continuous eval: step {max(done)} evaluated, the run's final step is {final}: done")
            return
        fresh = [p for p in sorted(list_checkpoints(model_dir), key=step_of) if step_of(p) not in done]
        if fresh:
            path = fresh[0]
            done.add(step_of(path))
            last_new = clock()
            yield path
            continue
        if finished is not None and not any(s >= finished for s in done) and not list_checkpoints(model_dir):
            log(f"continuous eval: the trainer finished at step {finished} and left no checkpoint to evaluate")
            return
        if clock() - last_new > timeout_seconds:
            log(f"continuous eval: no new checkpoint in {timeout_seconds:g} s: stopping")
            return
        sleep(poll_seconds)


def restored_checkpoints(model, model_dir: str, evaluated: Iterable[int], final_step: Optional[int],
                         poll_seconds: float, timeout_seconds: float, log: Callable[[str], None] = print
                         ) -> Iterator[Tuple[int, str]]:
    """`watch_checkpoints` over our training checkpoints with each one's weights loaded into `model`: yields
    `(step, path)`; a checkpoint whose files vanished before they were read (the trainer keeps only
    --keep_checkpoints) is skipped with a line saying so."""
    import tensorflow as tf

    from xlnet_tf.training import finetuning

    for path in watch_checkpoints(model_dir, finetuning.list_checkpoints, finetuning.checkpoint_step, evaluated,
                                  final_step, poll_seconds, timeout_seconds, log):
        try:
            finetuning.restore_weights(model, path)
        except (tf.errors.NotFoundError, tf.errors.DataLossError, ValueError) as e:
            log(f"continuous eval: {path} was deleted before it was read ({type(e).__name__}); skipped")
            continue
        yield finetuning.checkpoint_step(path), path


def write_scalars(writer, prefix: str, metrics: Dict, step: int) -> None:
    """The numeric `metrics` as TensorBoard scalars `<prefix>/<name>` at `step` (the eval/ events)."""
    from xlnet_tf.training import loop as training

    with writer.as_default():
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                training.write_scalar(f"{prefix}/{key}", float(value), step=step)
    writer.flush()


def versions(export_dir: str) -> Dict[int, str]:
    """`{version: path}` of the TF Serving versions under `export_dir` (integer-named folders)."""
    gfile = _gfile()
    if not gfile.isdir(export_dir):
        return {}
    out = {}
    for name in gfile.listdir(export_dir):
        name = name.rstrip("/")
        if name.isdigit() and gfile.isdir(os.path.join(export_dir, name)):
            out[int(name)] = os.path.join(export_dir, name)
    return out


def next_version(export_dir: str) -> int:
    return max(versions(export_dir), default=0) + 1


def exported_steps(export_dir: str) -> Dict[int, int]:
    """`{version: step}` of the versions whose provenance file records a step."""
    gfile = _gfile()
    out = {}
    for version, path in versions(export_dir).items():
        record = os.path.join(path, "assets.extra", PROVENANCE)
        if gfile.exists(record):
            out[version] = int(PROVENANCE_FILE.read(record)["step"])
    return out


def keep_newest(export_dir: str, keep: int, log: Callable[[str], None] = print) -> None:
    """Deletes the oldest versions beyond the `keep` newest (TF Serving serves the highest)."""
    gfile = _gfile()
    for version in sorted(versions(export_dir))[:-keep] if keep > 0 else []:
        path = os.path.join(export_dir, str(version))
        gfile.rmtree(path)
        log(f"continuous eval: removed export version {version} (--exports_to_keep={keep})")
