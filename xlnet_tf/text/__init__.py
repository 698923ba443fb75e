"""XLNet's input format, once: the layout (special, segment and pad ids, padding side per task, the truncation
rule) in `layout`, each layout's packer in numpy (`packing`, for the record builders) and its in-graph twin
(`packing_tf`, for `XLNetPreprocessor` and serving), tested equal on the shipped data of every task."""
