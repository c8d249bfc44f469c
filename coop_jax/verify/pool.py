"""``RuleVerifier``: batch verification in a process pool with hard per-item timeouts.

Each worker is a separate process (``forkserver`` by default, ``spawn`` on request; never
a plain fork, since the training process has JAX threads). The parent hands idle workers
small chunks and times every item on its own: a worker that spends more than
``timeout_s`` on one item is killed with SIGKILL and replaced; that item counts as
incorrect (``timed_out=True``) and the rest of its chunk is re-queued. A worker that
dies (e.g. on its address-space limit) is handled the same way. No signals are used in
the parent, so batches may be run from any thread; calls are serialised by a lock.
"""

from __future__ import annotations

import collections
import multiprocessing as mp
import threading
import time
from dataclasses import asdict, dataclass
from multiprocessing.connection import wait
from typing import Sequence

from coop_jax.verify import startup
from coop_jax.verify._worker import FAILED, worker_main
from coop_jax.verify.equivalence import VerifyResult
from coop_jax.verify.strict import check_mode

_WORKER_MODULE = "coop_jax.verify._worker"
_MAX_FAILED_STARTS = 3


@dataclass
class VerifierStats:
    """Running totals over the verifier's lifetime."""

    items: int = 0
    correct: int = 0
    timeouts: int = 0
    crashes: int = 0
    errors: int = 0
    worker_restarts: int = 0
    batches: int = 0
    busy_s: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


class _Worker:
    def __init__(self, ctx, extra_memory_bytes: int | None):
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=worker_main, args=(child_conn, extra_memory_bytes),
                                daemon=True, name="coop-verify-worker")
        self.proc.start()
        child_conn.close()
        self.conn = parent_conn
        self.ready = False
        self.born = time.monotonic()
        self.born_wall = time.time()
        self.pending: collections.deque[int] = collections.deque()
        self.item_started = 0.0

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=5)
        self.conn.close()


def _check_strs(name: str, values: Sequence) -> None:
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise TypeError(f"{name}[{i}] is {type(v).__name__}, expected str")


class RuleVerifier:
    """Process-pool rule verifier.

    Args:
        num_workers: worker processes (one per core is a good default).
        timeout_s: hard wall-clock limit per item.
        memory_limit_mb: address space each worker may add to what it maps at start
            (``RLIMIT_AS``); None disables the cap.
        start_method: ``"forkserver"`` (default; workers fork from a clean server that
            preloads the verifier, so restarts are cheap) or ``"spawn"``.
        chunk_size: most items handed to a worker at once.
        startup_timeout_s: how long a new worker may take to import and warm up.
        extraction: answer matching, one of ``EXTRACTION_MODES`` (``"lenient"``,
            ``"strict_boxed"``, ``"strict_hash"``; see :mod:`coop_jax.verify.strict`); used by
            :meth:`verify_batch` and :meth:`extract_batch`.
    """

    def __init__(self, num_workers: int = 2, timeout_s: float = 5.0,
                 memory_limit_mb: int | None = 2048, start_method: str = "forkserver",
                 chunk_size: int = 32, startup_timeout_s: float = 120.0,
                 extraction: str = "lenient"):
        startup.refuse_in_worker_bootstrap()
        check_mode(extraction)
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if memory_limit_mb is not None and memory_limit_mb < 1:
            raise ValueError(f"memory_limit_mb must be >= 1 or None, got {memory_limit_mb}")
        if start_method not in ("forkserver", "spawn"):
            raise ValueError(f"start_method must be 'forkserver' or 'spawn', got {start_method!r}")
        self.num_workers = num_workers
        self.extraction = extraction
        self.timeout_s = float(timeout_s)
        self.chunk_size = max(1, int(chunk_size))
        self.startup_timeout_s = startup_timeout_s
        self._extra_mem = None if memory_limit_mb is None else int(memory_limit_mb) << 20
        self._ctx = mp.get_context(start_method)
        if start_method == "forkserver":
            self._ctx.set_forkserver_preload([_WORKER_MODULE])
        self._lock = threading.Lock()
        self._stats = VerifierStats()
        self._closed = False
        self._failed_starts = 0
        self._first_failure: str | None = None  # the first failed worker's traceback
        self._workers: list[_Worker] = [self._new_worker() for _ in range(num_workers)]

    # ------------------------------------------------------------------ public API
    @property
    def stats(self) -> VerifierStats:
        """A snapshot of the running totals."""
        return VerifierStats(**self._stats.as_dict())

    def wait_ready(self) -> float:
        """Block until every worker has started and warmed up; return the seconds waited."""
        t0 = time.monotonic()
        with self._lock:
            while True:
                starting = [w for w in self._workers if not w.ready]
                if not starting:
                    return time.monotonic() - t0
                for conn in wait([w.conn for w in starting], timeout=1.0):
                    k = next((j for j, w in enumerate(self._workers) if w.conn is conn), None)
                    if k is not None:  # only "ready" or EOF can arrive from a starting worker
                        self._receive(k, "verify", [], collections.deque())
                now = time.monotonic()
                for k, w in enumerate(self._workers):
                    if not w.ready and now - w.born > self.startup_timeout_s:
                        self._start_failed(k, "did not start within startup_timeout_s")

    def verify_batch_detailed(self, references: Sequence[str],
                              completions: Sequence[str]) -> list[VerifyResult]:
        """Verdict and extracted answer for each pair, in input order."""
        if len(references) != len(completions):
            raise ValueError(f"references has {len(references)} items but completions has "
                             f"{len(completions)}")
        _check_strs("references", references)
        _check_strs("completions", completions)
        raw = self._run("verify", [(r, c, self.extraction) for r, c in zip(references, completions)])
        out = []
        for r in raw:
            if isinstance(r, VerifyResult):
                out.append(r)
            else:
                correct, extracted, error = r
                out.append(VerifyResult(bool(correct), extracted, False, error))
        with self._lock:
            self._stats.correct += sum(r.correct for r in out)
            self._stats.errors += sum(r.error is not None for r in out)
        return out

    def verify_batch(self, references: Sequence[str], completions: Sequence[str]) -> list[bool]:
        """``[verify(r, c) for r, c in zip(references, completions)]`` with hard timeouts."""
        return [r.correct for r in self.verify_batch_detailed(references, completions)]

    def extract_batch(self, texts: Sequence[str]) -> list[str | None]:
        """``[extract_answer(t) for t in texts]`` with hard timeouts (None on timeout)."""
        _check_strs("texts", texts)
        return self._run("extract", [(t, self.extraction) for t in texts])

    def equivalent_batch(self, a: Sequence[str], b: Sequence[str]) -> list[bool]:
        """``[answers_equivalent(x, y) for x, y in zip(a, b)]`` with hard timeouts."""
        if len(a) != len(b):
            raise ValueError(f"a has {len(a)} items but b has {len(b)}")
        _check_strs("a", a)
        _check_strs("b", b)
        return self._run("equiv", list(zip(a, b)))

    def close(self) -> None:
        """Stop all workers (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for w in self._workers:
                try:
                    w.conn.send(None)
                except (OSError, ValueError):
                    pass
            deadline = time.monotonic() + 2.0
            for w in self._workers:
                w.proc.join(timeout=max(0.0, deadline - time.monotonic()))
                w.kill()
            self._workers = []

    def __enter__(self) -> "RuleVerifier":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # ------------------------------------------------------------------ internals
    def _new_worker(self) -> _Worker:
        return _Worker(self._ctx, self._extra_mem)

    def _replace(self, k: int) -> None:
        self._workers[k].kill()
        self._workers[k] = self._new_worker()
        self._stats.worker_restarts += 1

    def _run(self, task: str, args: list[tuple]) -> list:
        with self._lock:
            if self._closed:
                raise RuntimeError("RuleVerifier is closed")
            t0 = time.monotonic()
            try:
                results = self._schedule(task, args)
            except BaseException:
                # Leave no worker holding a half-finished chunk for the next batch.
                for k, w in enumerate(self._workers):
                    if w.pending:
                        self._replace(k)
                raise
            self._stats.items += len(args)
            self._stats.batches += 1
            self._stats.busy_s += time.monotonic() - t0
            return results

    def _schedule(self, task: str, args: list[tuple]) -> list:
        n = len(args)
        results: list = [None] * n
        done = 0
        queue = collections.deque(range(n))
        while done < n:
            now = time.monotonic()
            for k, w in enumerate(self._workers):
                if w.ready and not w.pending and queue:
                    size = min(self.chunk_size, max(1, len(queue) // (2 * len(self._workers))))
                    chunk = [queue.popleft() for _ in range(min(size, len(queue)))]
                    try:
                        w.conn.send((task, [(i, args[i]) for i in chunk]))
                    except (OSError, EOFError):  # died while idle: nothing of this chunk ran
                        queue.extendleft(reversed(chunk))
                        self._replace(k)
                        continue
                    w.pending.extend(chunk)
                    w.item_started = now
            deadlines = [w.item_started + self.timeout_s if w.ready else
                         w.born + self.startup_timeout_s
                         for w in self._workers if w.pending or not w.ready]
            wait_s = max(0.0, min(deadlines) - now) if deadlines else None
            for conn in wait([w.conn for w in self._workers], timeout=wait_s):
                k = next((j for j, w in enumerate(self._workers) if w.conn is conn), None)
                if k is not None:
                    done += self._receive(k, task, results, queue)
            now = time.monotonic()
            for k, w in enumerate(self._workers):
                if w.ready and w.pending and now - w.item_started > self.timeout_s:
                    self._stats.timeouts += 1
                    done += self._fail_current(k, task, results, queue, timed_out=True)
                elif not w.ready and now - w.born > self.startup_timeout_s:
                    self._start_failed(k, "did not start within startup_timeout_s")
        return results

    def _receive(self, k: int, task: str, results: list, queue: collections.deque) -> int:
        w = self._workers[k]
        try:
            msg = w.conn.recv()
        except (EOFError, OSError):
            if not w.ready:
                w.proc.join(timeout=2.0)  # reap it, so the exit code is known
                self._start_failed(k, f"exited with code {w.proc.exitcode} during start-up")
                return 0
            self._stats.crashes += 1
            return self._fail_current(k, task, results, queue, timed_out=False)
        if msg[0] == "ready":
            w.ready = True
            self._failed_starts = 0
            return 0
        if msg[0] == "failed":  # warm-up raised; msg[1] is the worker's traceback
            self._first_failure = self._first_failure or msg[1]
            self._start_failed(k, "failed during start-up")
            return 0
        index, result = msg
        if w.pending and w.pending[0] == index:
            w.pending.popleft()
        results[index] = result
        w.item_started = time.monotonic()
        return 1

    def _fail_current(self, k: int, task: str, results: list, queue: collections.deque,
                      timed_out: bool) -> int:
        """Record the worker's current item as failed, re-queue its other items, replace it."""
        w = self._workers[k]
        finished = 0
        if w.pending:
            index = w.pending.popleft()
            if task == "verify":
                results[index] = VerifyResult(False, None, timed_out=timed_out,
                                              error=None if timed_out else "worker crashed")
            else:
                results[index] = FAILED[task]
            finished = 1
        queue.extendleft(reversed(w.pending))
        w.pending.clear()
        self._replace(k)
        return finished

    def _start_failed(self, k: int, why: str) -> None:
        w = self._workers[k]
        report = startup.take_report(w.proc.pid, w.born_wall)
        if startup.is_main_guard_report(report):  # every restart would fail the same way
            raise RuntimeError(f"verifier worker {why}.\n{startup.MAIN_GUARD_HINT}\n"
                               f"--- traceback of the first worker that failed ---\n{report}")
        self._first_failure = self._first_failure or report
        self._failed_starts += 1
        if self._failed_starts >= _MAX_FAILED_STARTS * self.num_workers:
            tb = self._first_failure or ("(no traceback came back: see the workers' stderr above; "
                                         "a worker that dies while importing the main script "
                                         "cannot report one)")
            raise RuntimeError(f"verifier worker {why}; giving up after {self._failed_starts} "
                               f"failed starts.\n{startup.MAIN_GUARD_HINT}\n"
                               f"--- traceback of the first worker that failed ---\n{tb}")
        self._replace(k)
