"""Worker process body for :class:`coop_jax.verify.pool.RuleVerifier`.

Protocol on a duplex ``Connection``: the worker sends ``("ready", pid)`` once warmed up,
then receives ``(task, [(index, args), ...])`` chunks (or ``None`` to stop) and answers
each item as soon as it is done with ``(index, result)`` so the parent can time every
item separately. Results are plain tuples/strings/bools to keep pickling cheap.
"""

from __future__ import annotations

import os
import resource
import signal
import time
import traceback
from typing import Callable

from coop_jax.verify.equivalence import answers_equivalent, verify_detailed
from coop_jax.verify.extract import extract_answer


def _verify_task(reference: str, completion: str,
                 extraction: str = "lenient") -> tuple[bool, str | None, str | None]:
    r = verify_detailed(reference, completion, extraction)
    return r.correct, r.extracted, r.error


def _equiv_task(a: str, b: str) -> bool:
    try:
        return answers_equivalent(a, b)
    except (Exception, RecursionError):
        return False


def _extract_task(text: str, mode: str = "lenient") -> str | None:
    try:
        return extract_answer(text, mode)
    except (Exception, RecursionError):
        return None


def _diag_sleep(seconds: float) -> bool:
    """Health-check task: hold the worker busy (exercises the hard timeout)."""
    time.sleep(seconds)
    return True


def _diag_alloc(megabytes: int) -> bool:
    """Health-check task: allocate memory (exercises the address-space limit)."""
    block = bytearray(megabytes << 20)
    return len(block) == megabytes << 20


def _diag_die() -> bool:
    """Health-check task: the worker dies mid-item (exercises crash recovery)."""
    os.kill(os.getpid(), signal.SIGKILL)
    return False


TASKS: dict[str, Callable] = {
    "verify": _verify_task,
    "equiv": _equiv_task,
    "extract": _extract_task,
    "_sleep": _diag_sleep,
    "_alloc": _diag_alloc,
    "_die": _diag_die,
}

# What each task reports for an item that timed out or crashed its worker.
FAILED: dict[str, object] = {"verify": (False, None, None), "equiv": False, "extract": None,
                             "_sleep": False, "_alloc": False, "_die": False}


def _vm_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def limit_memory(extra_bytes: int | None) -> None:
    """Cap the address space at what the process already maps plus ``extra_bytes``."""
    if not extra_bytes:
        return
    limit = _vm_bytes() + extra_bytes
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard if hard != resource.RLIM_INFINITY else limit))


def warm_up() -> None:
    """Load the ANTLR parser and sympy paths once so the first real item is not slow."""
    verify_detailed(r"\frac{\sqrt{3}}{2}", r"so \boxed{\frac{\sqrt3}{2}}")


def worker_main(conn, extra_memory_bytes: int | None) -> None:
    """Serve chunks until the parent sends ``None`` or goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    try:
        warm_up()
        limit_memory(extra_memory_bytes)
    except BaseException:  # the parent forwards this traceback in its start-up error
        conn.send(("failed", traceback.format_exc()))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        task, items = msg
        fn = TASKS[task]
        for index, args in items:
            try:
                result = fn(*args)
            except MemoryError:
                result = FAILED[task]
            conn.send((index, result))
