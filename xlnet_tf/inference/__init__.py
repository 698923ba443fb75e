"""Inference: cached generation and held-out language-model evaluation."""
