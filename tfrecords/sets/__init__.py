"""Makers of labelled sets (they write TSV/CoNLL/JSON, not records) and the pinned-package fetcher."""
