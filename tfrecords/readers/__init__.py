"""Readers of raw task files: tables (TSV/CSV), task processors, corpora, CoNLL, SQuAD JSON."""
