"""TF Serving export: `export(model, task, spiece_model, export_dir, version, max_seq_length, ...)` writes one
version of a task's SavedModel, and `SERVING_MODULES` maps each task to its serving module (both from
`saved_model.py`, loaded on first use). One module per task over a shared base: `base.py` (what every export
shares), `sequence.py` (classifier, regression, embedding), `race.py`, `squad.py`, `tagging.py`, `lm.py`;
`checks.py` (request checks); `hf_export.py` (Hugging Face's format)."""

import importlib

_PUBLIC = {"export": "xlnet_tf.serving.saved_model", "SERVING_MODULES": "xlnet_tf.serving.saved_model"}
__all__ = sorted(_PUBLIC)


def __getattr__(name):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'xlnet_tf.serving' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
