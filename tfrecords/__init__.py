"""Offline record builders and their tf.data readers (the record schema is defined here).

Modules: `spm` (SentencePiece training), `corpus` (reading text corpora), `permutation`
(span masking, factorization orders, compact encoding and its TF decoding),
`pretrain_data` (pretraining builder + reader), `manifest` (the JSON manifest).
"""
