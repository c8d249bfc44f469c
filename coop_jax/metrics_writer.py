"""Per-step metrics to `metrics.jsonl` and TensorBoard; resumable without duplicate steps."""
from __future__ import annotations

import json
import math
import os

import numpy as np

from coop_jax.jsonl import read_jsonl


def _jsonable(value):
    value = np.asarray(value).item() if hasattr(value, "shape") or isinstance(
        value, np.generic) else value
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricWriter:
    """`primary=False` (every process of a multi-host run but the first) writes nothing: the
    metrics are already reduced over all hosts."""

    def __init__(self, workdir: str, resume_step: int | None = None, tensorboard: bool = True,
                 filename: str = "metrics.jsonl", primary: bool = True):
        self.path = os.path.join(workdir, filename)
        self._file = self._tb = None
        if not primary:
            return
        if resume_step is not None and os.path.exists(self.path):
            # Drop steps written after the checkpoint we resume from: they will be redone.
            rows = [r for r in read_jsonl(self.path) if r.get("step", 0) <= resume_step]
            with open(self.path, "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows)
        elif resume_step is None and os.path.exists(self.path):
            os.remove(self.path)
        self._file = open(self.path, "a")
        self._tb = None
        if tensorboard:
            from tensorboardX import SummaryWriter
            self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"))

    def write(self, step: int, metrics: dict) -> dict:
        row = {"step": int(step)} | {k: _jsonable(v) for k, v in sorted(metrics.items())}
        if self._file is None:
            return row
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        if self._tb is not None:
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._tb.add_scalar(key, value, step)
        return row

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._tb is not None:
            self._tb.close()


def read_metrics(workdir: str) -> list[dict]:
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    return read_jsonl(path)
