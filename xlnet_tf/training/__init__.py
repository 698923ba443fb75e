"""The training loop, optimizers, strategies and what the fine-tuning runners share."""
