"""Pretraining records: config -> rows -> examples (span masks, baked factorization orders) -> writer; reader."""
