"""Strategy selection: `--tpu=NAME` -> TPUStrategy, else default / one_device / mirrored / multi_worker."""

from __future__ import annotations

import json
import os
from typing import Optional

import tensorflow as tf

STRATEGIES = ("default", "one_device", "mirrored", "multi_worker")


def get_strategy(strategy: str = "default", tpu: Optional[str] = None,
                 num_cpu_replicas: int = 0) -> tf.distribute.Strategy:
    """Returns the tf.distribute strategy a runner trains under.

    Args:
      strategy: `default` (no distribution), `one_device` (first GPU, else CPU), `mirrored` (all local
        GPUs, or `num_cpu_replicas` logical CPUs), `multi_worker` (MultiWorkerMirrored from `TF_CONFIG`).
      tpu: a TPU name or address (or `local`): TPUClusterResolver + TPUStrategy. Failing to reach it is an
        error, never a silent fallback to another strategy.
      num_cpu_replicas: split the CPU into this many logical devices first (tests and CPU-only mirrored
        runs); must be called before any op runs.
    """
    if tpu:
        try:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
        except (ValueError, RuntimeError, tf.errors.OpError) as e:
            raise RuntimeError(f"--tpu={tpu}: could not reach the TPU ({type(e).__name__}: {e}). "
                               f"Check the name/zone, or drop --tpu to train with --strategy.") from e
        return tf.distribute.TPUStrategy(resolver)
    if strategy not in STRATEGIES:
        raise ValueError(f"--strategy must be one of {STRATEGIES}, got {strategy!r}")
    if num_cpu_replicas > 1:
        cpus = tf.config.list_physical_devices("CPU")
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration()] * num_cpu_replicas)
    if strategy == "default":
        return tf.distribute.get_strategy()
    if strategy == "one_device":
        gpus = tf.config.list_logical_devices("GPU")
        return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
    if strategy == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices)
    if "TF_CONFIG" not in os.environ:
        raise ValueError("--strategy=multi_worker needs the TF_CONFIG environment variable "
                         "(cluster spec and this task's type/index)")
    try:
        json.loads(os.environ["TF_CONFIG"])
    except json.JSONDecodeError as e:
        raise ValueError(f"TF_CONFIG is not valid JSON: {e}") from e
    return tf.distribute.MultiWorkerMirroredStrategy()
