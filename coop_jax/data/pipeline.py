"""Host-sharded, resumable prompt batches and global arrays (left-padded tokenisation and
fixed-shape batches are `coop_jax.sampling.batching`'s, re-exported by `coop_jax.data`).

Every host computes the same global permutation of the records for each epoch (from
``(seed, epoch)``), cuts it into global batches of ``batch_size`` and keeps its own contiguous
slice of each batch. So the union of the host batches at step t is the same global batch whatever
the number of hosts, hosts never see the same record in one step, and over an epoch the hosts'
records are disjoint and cover the data (less the remainder when ``drop_remainder``). The state is
the global ``(epoch, position)``, so a run can resume exactly, even on a different host count.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

Record = dict[str, Any]


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


class PromptPipeline:
    """Infinite, epoch-reshuffled, host-sharded batches of records; see the module docstring."""

    def __init__(self, records: Sequence[Record], *, batch_size: int, seed: int,
                 process_index: int | None = None, process_count: int | None = None,
                 drop_remainder: bool = True) -> None:
        if process_index is None or process_count is None:
            import jax  # only needed for the defaults

            process_index = jax.process_index() if process_index is None else process_index
            process_count = jax.process_count() if process_count is None else process_count
        self.records = list(records)
        self.batch_size = _check_int("batch_size", batch_size, 1)
        self.seed = _check_int("seed", seed, 0)
        self.process_count = _check_int("process_count", process_count, 1)
        self.process_index = _check_int("process_index", process_index, 0)
        self.drop_remainder = bool(drop_remainder)
        if self.process_index >= self.process_count:
            raise ValueError(f"process_index must be < process_count ({self.process_count}), "
                             f"got {self.process_index}")
        if self.batch_size % self.process_count:
            raise ValueError(f"batch_size ({self.batch_size}) must be divisible by "
                             f"process_count ({self.process_count})")
        if not self.records:
            raise ValueError("records is empty")
        if self.drop_remainder and len(self.records) < self.batch_size:
            raise ValueError(f"batch_size ({self.batch_size}) exceeds the number of records "
                             f"({len(self.records)}) with drop_remainder=True")
        self.local_batch_size = self.batch_size // self.process_count
        self.epoch = 0
        self.position = 0
        self._order_cache: tuple[int, np.ndarray] | None = None

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The global permutation of record indices for ``epoch``."""
        if self._order_cache is None or self._order_cache[0] != epoch:
            rng = np.random.default_rng([self.seed, epoch])
            self._order_cache = (epoch, rng.permutation(len(self.records)))
        return self._order_cache[1]

    def _epoch_end(self) -> int:
        n = len(self.records)
        return n - n % self.batch_size if self.drop_remainder else n

    def next_global_indices(self) -> np.ndarray:
        """Record indices of the next global batch (advances the state)."""
        if self.position >= self._epoch_end():
            self.epoch, self.position = self.epoch + 1, 0
        order = self.epoch_order(self.epoch)
        idx = order[self.position:min(self.position + self.batch_size, self._epoch_end())]
        self.position += len(idx)
        return idx

    def next_batch(self) -> list[Record]:
        """This host's slice of the next global batch (``local_batch_size`` records, except
        possibly the last batch of an epoch when ``drop_remainder=False``)."""
        idx = self.next_global_indices()
        if len(idx) == self.batch_size:
            lo = self.process_index * self.local_batch_size
            local = idx[lo:lo + self.local_batch_size]
        else:
            local = np.array_split(idx, self.process_count)[self.process_index]
        return [self.records[int(i)] for i in local]

    def __iter__(self) -> Iterator[list[Record]]:
        while True:
            yield self.next_batch()

    def state(self) -> dict[str, int]:
        """JSON-serialisable state; ``restore`` of it resumes exactly."""
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed,
                "num_records": len(self.records), "batch_size": self.batch_size}

    def restore(self, state: dict[str, Any]) -> None:
        """Resume from ``state()``; seed, record count and batch size must match."""
        for key in ("seed", "num_records", "batch_size"):
            mine = {"seed": self.seed, "num_records": len(self.records),
                    "batch_size": self.batch_size}[key]
            if key in state and int(state[key]) != mine:
                raise ValueError(f"pipeline state {key}={state[key]} does not match this "
                                 f"pipeline's {key}={mine}")
        for key in ("epoch", "position"):
            if key not in state:
                raise ValueError(f"pipeline state lacks '{key}'")
        epoch = _check_int("state['epoch']", state["epoch"], 0)
        position = _check_int("state['position']", state["position"], 0)
        if position > self._epoch_end():
            raise ValueError(f"state['position']={position} is past the epoch end "
                             f"({self._epoch_end()})")
        self.epoch, self.position = epoch, position


def to_global_array(local: np.ndarray, mesh: Any, pspec: Any):
    """A global ``jax.Array`` sharded as ``NamedSharding(mesh, pspec)`` from this host's rows.

    Every host passes its local block (batch dim = global batch / process_count).
    """
    import jax
    from jax.sharding import NamedSharding

    return jax.make_array_from_process_local_data(NamedSharding(mesh, pspec), np.asarray(local))
