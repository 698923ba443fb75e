"""What the project writes and reads back, typed: the settings that shaped an artifact, compared whole.

- `provenance`: frozen dataclasses <-> JSON, and the one comparison every consumer makes (`require_same`:
  every differing field named in one line).
- `text_settings`: `TextSettings`, the tokenization an artifact was made with (SentencePiece checksum, casing,
  accents), recorded once in each artifact and compared as one object.
"""
