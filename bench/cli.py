"""The one command-line convention of bench/'s scripts, the runners' own (run/common_flags.py, xlnet_tf/cli.py):

- a script runs as a module from the repository root: `python -m bench.speed.harness --quick`,
  `python -m bench.studies.transfer.transfer --flagfile=bench/studies/transfer/flags/transfer_cpu.flags`;
- its flags are absl flags that its own `define_flags(fv)` defines into its own `FLAGS = flags.FlagValues()` when it
  starts (`run`), never at import: scripts imported into one process (a test, a study calling another's
  functions) keep their own flags and defaults; `--flagfile` and `--helpfull` work as for every absl program;
- a user error (a bad flag value, a missing file, bad data: `UserError`, absl's flag errors) is one line
  `<script>.py: error: <message>` on stderr, exit status 2; `--verbose` shows the traceback;
- a report names the command that makes it again (`command_line`, or `invocation` for a command given as typed).
"""

from __future__ import annotations

import shlex
import sys
from typing import Callable, Iterable, Optional

from absl import flags

from run import common_flags

Definer = common_flags.Definer  # `Definer(fv).string(name, default, help)`: a flag defined into `fv`


def run(fv: flags.FlagValues, define: Callable[[flags.FlagValues], None], main: Callable[[], object],
        argv: Optional[list] = None) -> None:
    """The entry point of a script: `define(fv)`, parse the command line (`argv`, default sys.argv), refuse a
    positional argument, then `main()` (which reads `fv`); a user error it raises is reported in one line."""
    common_flags.run_main(fv, define, main, argv)


def parse(fv: flags.FlagValues, define: Callable[[flags.FlagValues], None], args: Iterable[str]
          ) -> flags.FlagValues:
    """`fv` defined (once) and parsed from `args` (flags only, no program name), its earlier values reset: a
    script's `main()` run in-process (tests, notebooks)."""
    return common_flags.parse(fv, define, ["bench", *args])


def command_line(module: str, fv: flags.FlagValues) -> str:
    """`python -m <module>` and the value of every flag the script defines into `fv`, as a command that a shell
    runs again from the repository root (whatever the defaults become): a list joined by commas, a true boolean
    as `--name`, a false one as `--noname` where it was given (else left out: the default), None left out,
    values quoted where needed."""
    parts = ["python", "-m", module]
    for flag in (f for module_flags in fv.flags_by_module_dict().values() for f in module_flags):
        value = flag.value
        if value is None or (value is False and not flag.present):
            continue
        if isinstance(value, bool):
            parts.append(f"--{'' if value else 'no'}{flag.name}")
        elif isinstance(value, (list, tuple)):
            parts.append(f"--{flag.name}={','.join(map(str, value))}")
        else:
            parts.append(f"--{flag.name}={value}")
    return shlex.join(parts)


def invocation(module: str) -> str:
    """`python -m <module>` and this process's arguments as given (a `--flagfile` stays a flag file): the command
    of a script whose report shows what was typed."""
    return shlex.join(["python", "-m", module, *sys.argv[1:]])
