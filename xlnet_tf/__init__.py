"""xlnet_tf: XLNet (two-stream relative attention, Transformer-XL memories) on TensorFlow 2 + Keras 3.

The public API, importable from `xlnet_tf` (loaded on first use, so that `import xlnet_tf.cli` in a command-line
tool does not load TensorFlow):

- `XLNetConfig` (config), `XLNetBackbone` (backbone);
- `XLNetTokenizer`, `XLNetPreprocessor`, `XLNetTaggingPreprocessor` (text);
- the task models `XLNetPretrainer`, `XLNetClassifier`, `XLNetMultipleChoice`, `XLNetForSquad`, `XLNetTagger`
  (models) and `Task`, their Keras surface;
- `GenerationSettings`, `generate`, `generate_text` (inference).

The packages by concept: `layers/`, `models/`, `text/`, `training/`, `inference/`, `serving/`, `metrics/`,
`artifacts/` (files a run writes and reads back); `checkpoints` reads the original release's and Hugging Face's weights.
"""

import importlib
import sys

__version__ = "0.1.0"


def lazy_exports(package: str, exports: dict):
    """A package's public names loaded on first use (PEP 562): `exports` maps each name to the module defining
    it. Returns the package's `(__getattr__, __dir__)`; a name once loaded is kept in the package."""
    def __getattr__(name):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__


_PUBLIC = {
    "XLNetConfig": "xlnet_tf.config",
    "XLNetBackbone": "xlnet_tf.backbone",
    "XLNetTokenizer": "xlnet_tf.text.tokenization",
    "XLNetPreprocessor": "xlnet_tf.text.preprocessing",
    "XLNetTaggingPreprocessor": "xlnet_tf.text.tagging_preprocessor",
    "XLNetPretrainer": "xlnet_tf.models",
    "XLNetClassifier": "xlnet_tf.models",
    "XLNetMultipleChoice": "xlnet_tf.models",
    "XLNetForSquad": "xlnet_tf.models",
    "XLNetTagger": "xlnet_tf.models",
    "Task": "xlnet_tf.models.task",
    "GenerationSettings": "xlnet_tf.inference.generation",
    "generate": "xlnet_tf.inference.generation",
    "generate_text": "xlnet_tf.inference.generation",
}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)
