"""The one base class of the errors a user can fix (a bad flag, file, record set or model directory).

Every entry point reports a `UserError` as one line `<tool>: error: <message>` and exits with status 2,
without a traceback (`--verbose` shows it); anything else is a bug and keeps its traceback. The message
names the file, flag or field and says what to do. It is a `ValueError`, so code that catches those keeps
working.
"""


from typing import Sequence


class UserError(ValueError):
    """An error in the user's input, fixed by the user; its message names the file/flag/field."""


def some(items: Sequence, limit: int = 5) -> str:
    """The first `limit` of `items` quoted and joined for a one-line message, `and N more` after them."""
    shown = ", ".join(repr(item) for item in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")
