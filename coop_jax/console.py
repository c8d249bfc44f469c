"""Shared entry-point wrapper of the absl-flag console scripts."""
from __future__ import annotations

import logging
import sys
from typing import Any, Callable

from absl.app import UsageError


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
