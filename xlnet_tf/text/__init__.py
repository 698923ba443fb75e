"""XLNet's input format, once: the layout (special, segment and pad ids, padding side per task, the truncation
rule) in `layout`, each layout's packer in numpy (`packing`, for the record builders) and its in-graph twin
(`packing_tf`, for `XLNetPreprocessor` and serving), tested equal on the shipped data of every task;
`tokenization` (SentencePiece + XLNet's normalization), `offsets` (the same with character spans, for SQuAD),
`tagging` (word-to-piece alignment, tagging windows and stitching, numpy and in-graph side by side), and
`preprocessing` (the in-graph encoder and the Keras `XLNetPreprocessor`)."""
