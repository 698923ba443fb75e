"""Task metrics: classification, SQuAD (with its post-processing), tagging, RACE."""
