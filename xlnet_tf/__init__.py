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

__version__ = "0.1.0"

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


def __getattr__(name):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'xlnet_tf' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
