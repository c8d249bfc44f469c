"""Mesh with named axes (data, fsdp, tensor) and the logical-axis -> mesh-axis rules.

Every parameter of `coop_jax.models` names its dimensions logically ("embed", "heads", "mlp",
"vocab", ...). The rules below map those names onto mesh axes: the batch is split over data and
fsdp, weights are split over fsdp (ZeRO-3 style) on their embedding dimension and over tensor on
heads / mlp / vocab. Parameters are created already sharded by jitting the initialiser with the
resulting out_shardings, so no host holds a full copy.

`maybe_initialize_distributed` joins a multi-process run (several hosts, or several local
processes started by `coop_jax.launch.local`) before the mesh is built over all processes'
devices.
"""
from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from coop_jax import models
from coop_jax.sharding_rules import AXES, LOGICAL_RULES  # noqa: F401 (re-exported)
from coop_jax.parallel import host

if TYPE_CHECKING:
    import ml_collections

def make_mesh(shape: tuple[int, int, int], devices=None) -> Mesh:
    """A (data, fsdp, tensor) mesh; the product of `shape` must equal the device count."""
    devices = list(jax.devices() if devices is None else devices)
    shape = tuple(int(s) for s in shape)
    if len(shape) != 3 or any(s < 1 for s in shape):
        raise ValueError(f"mesh.shape must be three positive ints (data, fsdp, tensor), got {shape}")
    if int(np.prod(shape)) != len(devices):
        raise ValueError(f"mesh.shape {shape} has {int(np.prod(shape))} slots but there are "
                         f"{len(devices)} devices")
    try:
        from jax.experimental import mesh_utils
        grid = mesh_utils.create_device_mesh(shape, devices)
    except Exception:  # odd topologies (e.g. simulated CPU devices): plain reshape
        grid = np.asarray(devices).reshape(shape)
    return Mesh(grid, AXES)


def logical_sharding(mesh: Mesh, logical_axes: tuple[str | None, ...]) -> NamedSharding:
    spec = nn.logical_to_mesh_axes(logical_axes, LOGICAL_RULES)
    return NamedSharding(mesh, spec)


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
    """Leading dim over (data, fsdp), the rest replicated."""
    return NamedSharding(mesh, P(("data", "fsdp"), *([None] * (ndim - 1))))


def batch_shardings(batch: dict, mesh: Mesh) -> dict:
    """Per array of a batch dict of global shapes: `host.row_sharding` (leading dim over (data,
    fsdp) when it divides evenly, else replicated)."""
    return {k: host.row_sharding(mesh, np.shape(v)) for k, v in batch.items()}


def param_shardings(cfg: models.ModelConfig, mesh: Mesh):
    """NamedShardings for every parameter of `cfg`, from the logical names on its boxes."""
    specs = nn.get_partition_spec(models.abstract_params(cfg))
    return nn.logical_to_mesh_sharding(specs, mesh, LOGICAL_RULES)


def sharded_init(cfg: models.ModelConfig, rng: jax.Array, mesh: Mesh):
    """Random parameters created directly in their shards."""
    shardings = param_shardings(cfg, mesh)
    init = jax.jit(lambda r: nn.meta.unbox(models.init_boxed(cfg, r)), out_shardings=shardings)
    return init(rng)


def shard_params(params, cfg: models.ModelConfig, mesh: Mesh):
    """Place host (numpy) parameters onto the mesh with their named shardings."""
    return jax.device_put(params, param_shardings(cfg, mesh))


# (config field, COOP_* variable, JAX_* variable, parse); a config value of "" / 0 / -1 is unset.
_DISTRIBUTED_FIELDS = (
    ("coordinator_address", "COOP_COORDINATOR_ADDRESS", "JAX_COORDINATOR_ADDRESS", str),
    ("num_processes", "COOP_NUM_PROCESSES", "JAX_NUM_PROCESSES", int),
    ("process_id", "COOP_PROCESS_ID", "JAX_PROCESS_ID", int),
)
_UNSET = {"coordinator_address": "", "num_processes": 0, "process_id": -1}
_HOW_TO_SET = ("set mesh.coordinator_address, mesh.num_processes and mesh.process_id (or the "
               "environment variables COOP_COORDINATOR_ADDRESS, COOP_NUM_PROCESSES, "
               "COOP_PROCESS_ID), or start the processes with `python -m coop_jax.launch.local`")


def _resolve_distributed(mesh_config) -> dict[str, tuple[object, str]]:
    """Each set field -> (value, where it came from): the config field, else COOP_*, else JAX_*."""
    found = {}
    for field, coop_var, jax_var, parse in _DISTRIBUTED_FIELDS:
        value = (getattr(mesh_config, field, _UNSET[field]) if mesh_config is not None
                 else _UNSET[field])
        if value != _UNSET[field]:
            found[field] = (value, f"mesh.{field}")
            continue
        for var in (coop_var, jax_var):
            raw = os.environ.get(var, "").strip()
            if not raw:
                continue
            try:
                found[field] = (parse(raw), var)
            except ValueError:
                raise ValueError(f"environment variable {var} must be an integer, got {raw!r}"
                                 ) from None
            break
    return found


def _check_distributed(found: dict[str, tuple[object, str]]) -> None:
    address, num, pid = (found[f][0] for f in ("coordinator_address", "num_processes",
                                               "process_id"))
    where = {f: source for f, (_, source) in found.items()}
    host, _, port = str(address).rpartition(":")
    if not (isinstance(address, str) and host and port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"{where['coordinator_address']} must be 'host:port', got {address!r}")
    if isinstance(num, bool) or not isinstance(num, int) or num < 1:
        raise ValueError(f"{where['num_processes']} must be an integer >= 1, got {num!r}")
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 <= pid < num:
        raise ValueError(f"{where['process_id']} must be an integer in [0, {num}) "
                         f"(num_processes {num} from {where['num_processes']}), got {pid!r}")


def _backend_started() -> bool:
    try:
        from jax._src import xla_bridge
        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):
        return False


def _use_gloo_on_cpu() -> None:
    """Cross-process collectives on the CPU backend need an implementation (gloo); older JAX
    releases default to none. A choice made by the user (JAX_CPU_COLLECTIVES_IMPLEMENTATION or
    jax.config) is left alone."""
    platforms = [p.strip() for p in (jax.config.jax_platforms or "").split(",") if p.strip()]
    if platforms and "cpu" not in platforms:
        return
    if os.environ.get("JAX_CPU_COLLECTIVES_IMPLEMENTATION"):
        return
    if getattr(jax.config, "jax_cpu_collectives_implementation", "gloo") is None:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")


def maybe_initialize_distributed(mesh_config: ml_collections.ConfigDict | bool) -> None:
    """Multi-process start-up from the `config.mesh` section, typed or not (a bool is read as
    `mesh.distributed` with nothing else set).

    Nothing happens when `mesh.distributed` is False or when `jax.distributed` is already
    initialised (a notebook or a custom launcher did it). Otherwise the coordinator address,
    process count and process id come from `mesh.coordinator_address` / `mesh.num_processes` /
    `mesh.process_id`, else from COOP_COORDINATOR_ADDRESS / COOP_NUM_PROCESSES / COOP_PROCESS_ID
    (what `coop_jax.launch.local` exports), else JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES /
    JAX_PROCESS_ID. All three or none must be given: with none (or only JAX_COORDINATOR_ADDRESS,
    which JAX reads itself) JAX detects the cluster (Cloud TPU, SLURM, Open MPI, ...). Must run
    before anything touches a JAX device.
    """
    if isinstance(mesh_config, bool):
        enabled, mesh_config = mesh_config, None
    else:
        enabled = bool(mesh_config.distributed)
    if jax.distributed.is_initialized():
        logging.info("jax.distributed is already initialised (process %d of %d); not starting it "
                     "again", jax.process_index(), jax.process_count())
        return
    if not enabled:
        return
    if _backend_started():
        raise RuntimeError("mesh.distributed=True: jax.distributed must be initialised before "
                           "any JAX computation or device query in this process")
    found = _resolve_distributed(mesh_config)
    only_jax_address = set(found) == {"coordinator_address"} and (
        found["coordinator_address"][1] == "JAX_COORDINATOR_ADDRESS")
    if found and len(found) < 3 and not only_jax_address:
        missing = [f"mesh.{f} ({coop})" for f, coop, _, _ in _DISTRIBUTED_FIELDS if f not in found]
        given = [f"mesh.{f} (from {found[f][1]})" for f, _, _, _ in _DISTRIBUTED_FIELDS
                 if f in found]
        raise ValueError(f"mesh.distributed=True got {', '.join(given)} but not "
                         f"{', '.join(missing)}: set all three, or none for cluster "
                         "auto-detection")
    _use_gloo_on_cpu()
    if len(found) == 3:
        _check_distributed(found)
        kwargs = {f: value for f, (value, _) in found.items()}
        logging.info("jax.distributed: coordinator %s, process %d of %d (from %s)",
                     kwargs["coordinator_address"], kwargs["process_id"],
                     kwargs["num_processes"], ", ".join(sorted({s for _, s in found.values()})))
        jax.distributed.initialize(**kwargs)
    else:
        try:
            jax.distributed.initialize()
        except Exception as e:
            reason = " ".join(str(e).split()) or type(e).__name__
            raise ValueError(f"mesh.distributed=True but jax.distributed.initialize() found no "
                             f"cluster to join ({reason}); {_HOW_TO_SET}") from e
    logging.info("jax.distributed: process %d of %d, %d global devices", jax.process_index(),
                 jax.process_count(), jax.device_count())


def place_on_mesh(tree, mesh: Mesh):
    """Every leaf on `mesh`: arrays already sharded on it keep their named shardings, the rest
    (step counters, optimizer counts, host arrays) is replicated."""
    def place(x):
        sharding = getattr(x, "sharding", None)
        if isinstance(sharding, NamedSharding) and sharding.mesh == mesh:
            return x
        return jax.device_put(x, NamedSharding(mesh, P()))

    return jax.tree_util.tree_map(place, tree)
