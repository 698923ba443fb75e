"""TF Serving export: one serving module per task over a shared base."""
