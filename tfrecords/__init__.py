"""Offline record builders and their tf.data readers (the record schema is defined here).

Every builder's I/O: `records` (staged atomic writes, manifests, reading, splitting), `manifest`, `record_inputs`
(input fingerprints, the plan of which splits to build), `spm` (SentencePiece training).
`readers/`: raw task files (`tables` TSV/CSV, task `processors`, `corpus`, `conll`, `squad_examples`).
One builder per task: `classifier_data`, `race_data`, `squad_data`, `tagging_data` (examples -> features ->
records); `pretrain/`: `config` (settings) -> `rows` (corpus -> rows) -> `examples` (span masks, baked
factorization orders from `permutation`) -> `writer`, read by `reader` (Beam reuses the chain: `beam/`).
`sets/`: makers of labelled sets that write TSV/CoNLL/JSON, not records. The CLIs: `build_*.py`, `inspect_records.py`.
"""
