"""Offline record builders and their tf.data readers (the record schema is defined here).

Shared I/O: `records` (staged atomic writes, manifests, reading, splitting), `manifest`, `record_inputs`
(input fingerprints). Readers and processors: `tables`, `processors`, `corpus`, `conll`, `squad_examples`.
Builders, one task each: `classifier_data`, `race_data`, `squad_data`, `tagging_data`, and pretraining as
`pretrain_config` (settings) -> `pretrain_rows` (corpus -> rows) -> `pretrain_examples` (span masks, baked
factorization orders from `permutation`) -> `pretrain_data` (the writer), read by `pretrain_reader`. Corpus
scripts: `brown_genre`, `brown_pos`; SentencePiece training: `spm`; Beam pipelines: `beam/`.
"""
