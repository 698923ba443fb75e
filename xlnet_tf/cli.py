"""One command-line convention for every entry point (runners in run/, builders in tfrecords/): a user error
(a bad flag value, a missing file, bad data; `xlnet_tf.errors.UserError`) is one line on stderr,

    <tool>.py: error: <message>

and exit status 2 (argparse's convention for usage errors), never a traceback (`--verbose` runners show it).
Defines no flags: entry points define their own when they start; this only runs them.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Optional

from xlnet_tf.errors import UserError


def user_errors() -> tuple:
    """What a user fixes: our `UserError`s, a bad flag (absl's `flags.Error`) and a missing file."""
    from absl import flags

    return (UserError, flags.Error, FileNotFoundError)


def report_user_error(error: BaseException, tool: Optional[str] = None) -> None:
    """Prints `<tool>: error: <message>` (one line: whitespace folded) on stderr and exits with status 2."""
    tool = tool or os.path.basename(sys.argv[0])
    message = " ".join(str(error).split()) or type(error).__name__
    print(f"{tool}: error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def parse_flags_or_report(argv):
    """absl.app's flag parser, with a bad flag value (out of its range, unknown, unparsable) reported as the
    other user errors are (absl's own prints "FATAL Flags parsing error" and a hint over two lines, exit 1)."""
    from absl import flags

    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        report_user_error(e)


def run(main: Callable, errors: tuple = ()) -> None:
    """`absl.app.run(main)` under this convention: flags parsed by `parse_flags_or_report`; a user error (or
    one of `errors`, e.g. `ValueError` for a builder whose library checks raise it) raised by `main` is
    reported in one line, exit status 2."""
    from absl import app

    caught = user_errors() + (app.UsageError,) + tuple(errors)

    def reported(argv):
        try:
            return main(argv)
        except caught as e:
            report_user_error(e)

    app.run(reported, flags_parser=parse_flags_or_report)
