"""Per-step metrics to `metrics.jsonl`, TensorBoard and, given a project, Weights & Biases;
resumable without duplicate steps.

W&B (`wandb_project`; `pip install wandb`, in the test extra): the run is
`<workdir>/wandb/` (or `wandb_dir`), named after the workdir, and a resumed run continues the same
W&B run (its id is kept in `<workdir>/wandb_run_id`). `wandb_mode="offline"` (or the environment's
`WANDB_MODE=offline`) needs no network and no account: `wandb sync` uploads the folder later.
"""
from __future__ import annotations

import json
import math
import os

import numpy as np

from coop_jax.jsonl import exists as jsonl_exists, read_jsonl


def _jsonable(value):
    value = np.asarray(value).item() if hasattr(value, "shape") or isinstance(
        value, np.generic) else value
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def metrics_row(step: int, metrics: dict) -> dict:
    """The `metrics.jsonl` row of one step: its metrics as JSON values (a non-finite float is
    None), keys sorted after "step"."""
    return {"step": int(step)} | {k: _jsonable(v) for k, v in sorted(metrics.items())}


class MetricWriter:
    """`primary=False` (every process of a multi-host run but the first) writes nothing: the
    metrics are already reduced over all hosts."""

    def __init__(self, workdir: str, resume_step: int | None = None, tensorboard: bool = True,
                 filename: str = "metrics.jsonl", primary: bool = True,
                 wandb_project: str | None = None, wandb_dir: str | None = None,
                 wandb_mode: str | None = None, wandb_config: dict | None = None):
        self.path = os.path.join(workdir, filename)
        self._file = self._tb = self._wandb = None
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
        if wandb_project:
            self._wandb = wandb_run(workdir, wandb_project, wandb_dir, wandb_mode, wandb_config,
                                    resume=resume_step is not None)

    def write(self, step: int, metrics: dict) -> dict:
        row = metrics_row(step, metrics)
        if self._file is None:
            return row
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        scalars = {k: v for k, v in row.items() if k != "step" and isinstance(v, (int, float))
                   and not isinstance(v, bool)}
        if self._tb is not None:
            for key, value in scalars.items():
                self._tb.add_scalar(key, value, step)
        if self._wandb is not None:
            self._wandb.log(scalars, step=int(step))
        return row

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


def wandb_run(workdir: str, project: str, folder: str | None = None, mode: str | None = None,
              config: dict | None = None, resume: bool = False):
    """A started W&B run of `workdir` (module doc); `mode` None: W&B's own (`WANDB_MODE`)."""
    import wandb

    id_file = os.path.join(workdir, "wandb_run_id")
    run_id = None
    if resume and os.path.isfile(id_file):
        with open(id_file) as fh:
            run_id = fh.read().strip() or None
    folder = folder or workdir
    os.makedirs(folder, exist_ok=True)
    run = wandb.init(project=project, dir=folder, mode=mode, config=config, id=run_id,
                     resume="allow" if run_id else None,
                     name=os.path.basename(os.path.abspath(workdir)),
                     settings=wandb.Settings(console="off"))
    with open(id_file, "w") as fh:
        fh.write(run.id)
    return run


def read_metrics(workdir: str) -> list[dict]:
    """The rows of `workdir`'s metrics.jsonl (or its kept metrics.jsonl.xz); [] without one."""
    path = os.path.join(workdir, "metrics.jsonl")
    if not jsonl_exists(path):
        return []
    return read_jsonl(path)
