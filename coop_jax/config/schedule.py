"""The run's schedule and machine: steps and checkpoints (`train`), the evaluators with their
cadence (`evals`, declared the big_vision way: `evals.<name> = dict(every=N)`), the evaluation's
sampling (`eval`), the kernels and the device mesh."""
from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Mapping

from coop_jax import kernels
from coop_jax.config.fields import (Section, at_least, field, in_unit_interval, non_negative,
                                    positive)
from coop_jax.config.sections import EVAL_HEADLINES, NAN_POLICIES


@dataclasses.dataclass(frozen=True)
class Train(Section):
    checkpoint_every: int = field(25, "save a checkpoint every N steps")
    keep_checkpoints: int = field(3, "newest checkpoints kept")
    log_every: int = field(1, "log metrics every N steps")
    max_nan_skips: int = field(10, "skip: most updates dropped before the run stops")
    nan_policy: str = field("error", "a non-finite loss: error | skip (stop | drop the update)",
                            choices=NAN_POLICIES)
    steps: int = field(100, "RL steps", check=non_negative)


@dataclasses.dataclass(frozen=True)
class Every(Section):
    """One evaluator's schedule: before RL, every `every` steps and after the last step."""
    every: int = field(0, "run every N steps (0: before RL and after the last step only; -1: "
                       "never, the evaluator is off)", check=at_least(-1))


# the evaluators a config declares by default, in the order they run, and their docs
DEFAULT_EVALS = {
    "policy": (25, "evaluate the policy on the held-out split every N steps (0: at the start "
                   "and the end only)"),
    "rm_heldout": (10, "evaluate the RM on rm.heldout_triples every N steps"),
    "probes": (0, "log the probes' RM false-accept rate and policy log-likelihood every N steps "
                  "(0: step 0 and the last only)"),
}


class Evals(Section):
    """The evaluators a run declares (trainer.evaluators.EVALUATORS names), each with its
    schedule: `evals.policy.every`. A config file drops one with `del c.evals.probes`, a
    command line with `--config.evals.probes.every=-1`."""

    def __init__(self, entries: Mapping[str, Every] | None = None):
        if entries is None:
            entries = {name: Every(every) for name, (every, _) in DEFAULT_EVALS.items()}
        object.__setattr__(self, "_entries", dict(entries))

    def __getattr__(self, name: str) -> Every:
        try:
            return self.__dict__["_entries"][name]
        except KeyError:
            raise AttributeError(f"config.evals declares no {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __eq__(self, other) -> bool:
        return isinstance(other, Evals) and self._entries == other._entries

    def __hash__(self) -> int:
        return hash(tuple(self._entries.items()))

    def __repr__(self) -> str:
        return f"Evals({self._entries!r})"

    def names(self) -> Iterator[str]:
        return iter(self._entries)

    @classmethod
    def build(cls, values: Mapping[str, Any], path: str, plugin_fields=frozenset()) -> "Evals":
        return cls({name: Every.build(entry, f"{path}.{name}", plugin_fields)
                    for name, entry in values.items()})

    def to_dict(self) -> dict:
        return {name: entry.to_dict() for name, entry in self._entries.items()}


@dataclasses.dataclass(frozen=True)
class Eval(Section):
    """Every evaluation logs greedy accuracy and avg@k (k samples at temperature / top_p);
    `headline` names the one summary.json leads with (the papers report avg@8, T 0.7, top-p
    0.95)."""
    batch_size: int = field(64, "prompts per evaluation batch")
    headline: str = field("avg_at_k", "the summary's headline metric: avg_at_k | greedy",
                          choices=EVAL_HEADLINES)
    k: int = field(8, "samples per problem for avg@k / pass@k", check=positive)
    temperature: float = field(0.7, "avg@k sampling temperature", check=positive)
    top_p: float = field(0.95, "avg@k nucleus sampling threshold", check=in_unit_interval)


@dataclasses.dataclass(frozen=True)
class Kernels(Section):
    impl: str = field("auto", "kernel implementation of sampling and log-probs",
                      choices=kernels.IMPLS)


def _mesh_shape(shape) -> str | None:
    ok = (len(shape) == 3 and all(isinstance(s, int) for s in shape)
          and sum(1 for s in shape if s == -1) <= 1 and not any(s == 0 or s < -1 for s in shape))
    return None if ok else "three ints (data, fsdp, tensor) with at most one -1"


def _address(address: str) -> str | None:
    host, _, port = address.rpartition(":")
    if not address or (host and port.isdigit() and 0 < int(port) < 65536):
        return None
    return "'host:port' (or \"\" for the environment / cluster auto-detection)"


@dataclasses.dataclass(frozen=True)
class Mesh(Section):
    """Devices: shape (data, fsdp, tensor), one -1 allowed. distributed: join a multi-process run
    (parallel.maybe_initialize_distributed); unset ("", 0, -1) the three process fields come from
    COOP_COORDINATOR_ADDRESS / COOP_NUM_PROCESSES / COOP_PROCESS_ID (coop_jax.launch.local), else
    JAX detects the cluster. Give all three or none."""
    coordinator_address: str = field("", "host:port of process 0 (\"\": environment / "
                                     "auto-detect)", check=_address)
    distributed: bool = field(False, "join a multi-process run (jax.distributed)")
    num_processes: int = field(0, "processes of the run (0: environment / auto-detect)",
                               check=lambda n: None if n >= 0 else "an integer >= 0")
    process_id: int = field(-1, "this process's index (-1: environment / auto-detect)",
                            check=lambda n: None if n >= -1 else "an integer >= -1")
    shape: tuple = field((-1, 1, 1), "device mesh (data, fsdp, tensor); one -1 takes the "
                         "remaining devices", check=_mesh_shape)

    def check(self, path: str) -> None:
        num, pid = self.num_processes, self.process_id
        if num and pid >= num:
            raise ValueError(f"config.{path}.process_id ({pid}) must be < {path}.num_processes "
                             f"({num})")


def resolve_mesh_shape(shape, device_count: int) -> tuple[int, int, int]:
    """Fill a -1 entry with the remaining devices and check the product."""
    shape = [int(s) for s in shape]
    known = 1
    for s in shape:
        known *= s if s != -1 else 1
    if -1 in shape:
        if device_count % known:
            raise ValueError(f"config.mesh.shape {tuple(shape)} does not divide the "
                             f"{device_count} devices")
        shape[shape.index(-1)] = device_count // known
    if shape[0] * shape[1] * shape[2] != device_count:
        raise ValueError(f"config.mesh.shape {tuple(shape)} needs {shape[0] * shape[1] * shape[2]} "
                         f"devices but there are {device_count}")
    return tuple(shape)
