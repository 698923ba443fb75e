"""TF Serving export: `export(model, task, spiece_model, export_dir, version, max_seq_length, ...)` writes one
version of a task's SavedModel, and `SERVING_MODULES` maps each task to its serving module (both from
`saved_model.py`, loaded on first use). One module per task over a shared base: `base.py` (what every export
shares), `sequence.py` (classifier, regression, embedding), `race.py`, `squad.py`, `tagging.py`, `lm.py`;
`checks.py` (request checks); `hf_export.py` (Hugging Face's format)."""

from xlnet_tf import lazy_exports

_PUBLIC = {"export": "xlnet_tf.serving.saved_model", "SERVING_MODULES": "xlnet_tf.serving.saved_model"}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)
