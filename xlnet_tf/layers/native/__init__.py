"""C++ TensorFlow ops of our own, built on first use (library.py)."""
