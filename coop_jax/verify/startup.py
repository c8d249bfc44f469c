"""Telling the parent why a verifier worker could not start.

The common failure: a script creates a :class:`~coop_jax.verify.RuleVerifier` at module level
with no ``if __name__ == "__main__":`` guard. A ``forkserver`` or ``spawn`` worker re-imports
the main script before it runs any verifier code, so it would build a verifier of its own.
The verifier notices that it is being built inside such a start-up import, writes the stack to
a per-pid report file and stops that worker; the parent reads the report back and raises one
error that names the cause and the fix, with the worker's traceback.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import traceback
from pathlib import Path

MAIN_GUARD_HINT = (
    "Likely cause: the script creates a RuleVerifier (or runs its work) at module level "
    "without an `if __name__ == \"__main__\":` guard. Verifier workers start with "
    "'forkserver' or 'spawn', which re-import the main script in every worker. Fix: move the "
    "code that creates the verifier and runs the work into a function called under "
    "`if __name__ == \"__main__\":`.")
_MARKER = "coop-verify: RuleVerifier created while a worker process imports the main module"


def _report_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"coop-verify-startup-{os.getuid()}"


def in_worker_bootstrap() -> bool:
    """True while a spawn/forkserver child is still importing its parent's main module."""
    return bool(getattr(mp.current_process(), "_inheriting", False))


def refuse_in_worker_bootstrap() -> None:
    """Raise (and leave a report for the parent) when called during a worker's start-up."""
    if not in_worker_bootstrap():
        return
    stack = "".join(traceback.format_stack()[:-2])
    text = f"{_MARKER}\n{stack}"
    try:
        d = _report_dir()
        d.mkdir(mode=0o700, exist_ok=True)
        (d / f"{os.getpid()}.txt").write_text(text)
    except OSError:
        pass  # the error below still reaches this worker's stderr
    raise RuntimeError(f"{_MARKER}.\n{MAIN_GUARD_HINT}")


def take_report(pid: int | None, since: float) -> str | None:
    """The report a worker with ``pid`` wrote after wall time ``since`` (removed once read)."""
    if pid is None:
        return None
    path = _report_dir() / f"{pid}.txt"
    try:
        if path.stat().st_mtime < since - 1.0:
            return None
        text = path.read_text()
        path.unlink()
        return text
    except OSError:
        return None


def is_main_guard_report(report: str | None) -> bool:
    return bool(report) and report.startswith(_MARKER)
