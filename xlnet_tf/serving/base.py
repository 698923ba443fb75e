"""What every XLNet SavedModel shares: the task model held out of the object graph (its variables saved), the
SentencePiece tokenizer in the graph (`preprocessing.XLNetTextEncoder`: the model travels inside the export, so
raw text is tokenized exactly as the record builders did), the `from_ids` request checks, the last-layer states
behind `features`, and the assembly of a task's signatures. One subclass per task serves it
(xlnet_tf/serving/{sequence,race,squad,tagging,lm}.py; `saved_model.SERVING_MODULES` maps the task names to them).

The signatures of a fine-tuned model's export (each task module's docstring gives its inputs and outputs):
- `serving_default`: raw UTF-8 strings `[B]` (the task's text inputs) -> the task's predictions;
- `from_ids`: `input_ids`, `segment_ids` int32 `[B, L]` and `attention_mask` float32 `[B, L]` (1 = real token;
  a task may add inputs or a choice / segment axis) -> the same predictions. Batch size and length are variable;
- `features`: the text inputs of `serving_default` (the same checks) -> the backbone's last-layer content stream,
  `token_states [B, L, D]` float32, with `input_ids [B, L]` int32, `attention_mask [B, L]` float32 (1 = real
  token) and `pooled [B, D]` (the summary the task's head reads, or the state at `<cls>`);
- a task may add its own (a tagger's `from_words`).

Bad requests are rejected with an error that names the signature and the input (never a silently wrong answer):
raw text must be valid UTF-8 without control characters other than tab and line ends (as for the record
builders), the text inputs of one request must have the same batch size, every input its rank; `from_ids` needs
ids in `[0, n_token)`, every tensor of one shape, an attention mask of 0/1 and at most the exported
`max_seq_length` positions (texts are truncated as the builders do; ids are not, because only the caller knows
which tokens may go).
"""

from __future__ import annotations

from typing import Dict, List, Tuple

import tensorflow as tf

from xlnet_tf.artifacts.export_info import ExportInfo
from xlnet_tf.serving.checks import checked_texts, rank_is, signature_function, string_spec, trim_left
from xlnet_tf.text import preprocessing


def ids_specs(rank: int = 2) -> List[tf.TensorSpec]:
    """`from_ids`'s three inputs, `rank` dimensions of any size: `input_ids`, `segment_ids` int32 and
    `attention_mask` float32."""
    return [tf.TensorSpec([None] * rank, tf.int32, name="input_ids"),
            tf.TensorSpec([None] * rank, tf.int32, name="segment_ids"),
            tf.TensorSpec([None] * rank, tf.float32, name="attention_mask")]


class _Untracked:
    """Holds the Keras model out of the SavedModel's object graph (saving would otherwise try to trace the Keras
    model's own `call` with default float inputs); its variables are tracked explicitly."""

    def __init__(self, value):
        self.value = value


class ServingModule(tf.Module):
    """The exported module of one task: the model, the in-graph encoder and the task's signatures.

    Args:
      model: the task model (a Keras model of xlnet_tf.models), its weights loaded.
      info: the export's settings (`ExportInfo`: `task`, `max_seq_length`, `text` normalization, and the task's
        own fields; absent optional fields take the task module's defaults).
      spiece_proto: the serialized SentencePiece model the records were built with.

    A subclass names the `TASKS` it serves and gives `text_outputs`, `text_features` and `ids_signature` (and
    `text_signature` for text inputs other than one `text`, `more_signatures` for signatures of its own), which
    `signatures()` assembles; or it overrides `signatures()` (the language model: `generate` and `features`).
    """

    TASKS: Tuple[str, ...] = ()
    LONG_DOCUMENTS = False  # True: may read documents of `max_segments` > 1 segments (a model with `mem_len`)

    def __init__(self, model, info: ExportInfo, spiece_proto: bytes):
        if info.task not in self.TASKS:
            raise ValueError(f"{type(self).__name__} serves the tasks {self.TASKS}, not {info.task!r}")
        super().__init__(name=f"xlnet_{info.task}")
        max_segments = info.max_segments or 1
        if max_segments > 1 and not (self.LONG_DOCUMENTS and getattr(model, "mem_len", None)):
            raise ValueError(f"max_segments={info.max_segments}: long documents need a classifier/regression model "
                             "built with mem_len")
        self._model = _Untracked(model)
        self.model_variables = list(model.variables)  # tracked explicitly: they are what gets saved
        self.encoder = preprocessing.XLNetTextEncoder(spiece_proto, uncased=info.text.uncased,
                                                      keep_accents=info.text.keep_accents)
        self.task = info.task
        self.max_seq_length = info.max_seq_length

    @property
    def model(self):
        return self._model.value

    # ------------------------------------------------------------------------------------ signatures
    def signatures(self) -> Dict[str, tf.types.experimental.PolymorphicFunction]:
        """The signatures by name (`checks.signature_function`s, which `tf.saved_model.save` traces itself, once
        each), each also kept on the module (`serve_text`, `serve_ids`, `serve_features`, ...)."""
        self.serve_text = self.text_signature(self.text_outputs, "serving_default")
        self.serve_ids = self.ids_signature()
        out = {"serving_default": self.serve_text, "from_ids": self.serve_ids, **self.more_signatures()}
        self.serve_features = self.text_signature(self.text_features, "features")
        out["features"] = self.serve_features
        return out

    def text_signature(self, outputs, signature: str):
        """The task's raw-text inputs, checked (naming `signature`), given to `outputs` (`text_outputs` or
        `text_features`) as a signature function: by default one input, `text [B]` string."""
        def texts(text):
            (text,) = checked_texts(signature, {"text": text})
            return outputs(text)

        return signature_function(texts, [string_spec("text")])

    def text_outputs(self, *texts) -> Dict[str, tf.Tensor]:
        """`serving_default`: the checked raw texts -> the task's predictions."""
        raise NotImplementedError

    def text_features(self, *texts) -> Dict[str, tf.Tensor]:
        """`features`: the checked raw texts -> the last-layer states (module docstring)."""
        raise NotImplementedError

    def ids_signature(self):
        """`from_ids` as a signature function."""
        raise NotImplementedError

    def more_signatures(self) -> Dict[str, tf.types.experimental.PolymorphicFunction]:
        """The task's signatures beyond the three every export has (none by default)."""
        return {}

    # ------------------------------------------------------------------------------------ from_ids
    def checked_ids(self, input_ids, segment_ids, attention_mask, rank: int = 2, **more):
        """`from_ids` validation: the three id inputs (`rank` dimensions), returned only after every check passed
        (one message per input): the shared ones, then the task's (`more_id_checks`, given `more`, the task's
        other inputs). The value checks read the rank-checked tensors (data dependencies: Grappler keeps them)."""
        input_ids, segment_ids, attention_mask = (
            rank_is("from_ids", name, t, rank) for name, t in
            (("input_ids", input_ids), ("segment_ids", segment_ids), ("attention_mask", attention_mask)))
        shape = tf.shape(input_ids)
        checks = self.id_checks(input_ids, segment_ids, attention_mask, shape) + self.more_id_checks(shape, **more)
        with tf.control_dependencies(checks):
            return tf.identity(input_ids), tf.identity(segment_ids), tf.identity(attention_mask)

    def id_checks(self, input_ids, segment_ids, attention_mask, shape) -> List[tf.Operation]:
        """Every export's `from_ids` bounds: one shape, ids in the vocabulary, a 0/1 mask, at most
        `max_seq_length` positions."""
        n_token = self.model.backbone.config.n_token
        return [
            tf.debugging.Assert(tf.reduce_all(tf.equal(tf.shape(segment_ids), shape)),
                                ["from_ids: segment_ids must have the shape of input_ids"]),
            tf.debugging.Assert(tf.reduce_all(tf.equal(tf.shape(attention_mask), shape)),
                                ["from_ids: attention_mask must have the shape of input_ids"]),
            tf.debugging.Assert(tf.reduce_all((input_ids >= 0) & (input_ids < n_token)),
                                [f"from_ids: input_ids must be in [0, {n_token}) (the exported vocabulary)"]),
            tf.debugging.Assert(tf.reduce_all(tf.equal(attention_mask, 0.0) | tf.equal(attention_mask, 1.0)),
                                ["from_ids: attention_mask must be 1 (real token) or 0 (padding)"]),
            tf.debugging.Assert(shape[-1] <= self.max_seq_length,
                                [f"from_ids: input_ids is longer than the exported max_seq_length="
                                 f"{self.max_seq_length}; shorten the ids (keeping <sep>/<cls>) or send text "
                                 "to serving_default"]),
        ]

    def more_id_checks(self, shape, **more) -> List[tf.Operation]:
        """The task's own `from_ids` checks (`shape`: that of `input_ids`); none by default."""
        return []

    # ------------------------------------------------------------------------------------ features
    def content_states(self, input_ids, segment_ids, attention_mask, trim: str = "left"):
        """Packed `[N, L]` -> the backbone's last-layer content stream `[N, L', D]` (every row) and the masks
        `{"input_ids": [N, L'], "attention_mask": [N, L'] float32}`, the L - L' columns that are padding in every
        row dropped (left-padded inputs; `trim="right"`: right-padded)."""
        if trim == "left":
            input_ids, segment_ids, attention_mask = trim_left(input_ids, segment_ids, attention_mask)
        else:
            length = tf.maximum(tf.reduce_max(tf.cast(tf.reduce_sum(attention_mask, 1), tf.int32)), 1)
            input_ids, segment_ids, attention_mask = (x[:, :length] for x in (input_ids, segment_ids, attention_mask))
        content = self.model.backbone(input_ids, segment_ids=segment_ids, attention_mask=attention_mask,
                                      training=False)["content"]
        return content, {"input_ids": input_ids, "attention_mask": tf.cast(attention_mask, tf.float32)}

    def summarized_states(self, input_ids, segment_ids, attention_mask) -> Dict[str, tf.Tensor]:
        """Left-padded `[N, L]` -> `features`' outputs with `pooled` the model's sequence summary (the one its
        head reads, projection included)."""
        content, out = self.content_states(input_ids, segment_ids, attention_mask)
        pooled = self.model.sequence_summary(content, out["attention_mask"])
        return {**out, "token_states": tf.cast(content, tf.float32), "pooled": tf.cast(pooled, tf.float32)}
