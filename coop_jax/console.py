"""Shared entry-point wrapper of the absl-flag console scripts."""
from __future__ import annotations

import logging
import sys
from typing import Any, Callable

from absl import flags
from absl.app import UsageError


def parse_flags(define: Callable[[flags.FlagValues, list[str]], None],
                argv: list[str]) -> flags.FlagValues:
    """Fresh FlagValues (so `main(argv)` can be called in-process), defined by `define(fv,
    argv)` and parsed; bad flags and stray positional arguments raise UsageError."""
    fv = flags.FlagValues()
    define(fv, argv)
    try:
        rest = fv(argv)
    except flags.Error as e:
        raise UsageError(str(e)) from e
    if len(rest) > 1:
        raise UsageError(f"unexpected positional arguments: {rest[1:]}")
    return fv


def run_console(main: Callable[[list[str]], Any], prog: str) -> None:
    """`main(sys.argv)` with coop_jax's logging; a UsageError prints `prog: error: ...` and exits
    with status 2."""
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.WARNING)  # orbax logs every save at INFO
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("coop_jax").setLevel(logging.INFO)
    try:
        main(sys.argv)
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        sys.exit(2)
