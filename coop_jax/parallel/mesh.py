"""Mesh with named axes (data, fsdp, tensor) and the logical-axis -> mesh-axis rules.

Every parameter of `coop_jax.models` names its dimensions logically ("embed", "heads", "mlp",
"vocab", ...). The rules below map those names onto mesh axes: the batch is split over data and
fsdp, weights are split over fsdp (ZeRO-3 style) on their embedding dimension and over tensor on
heads / mlp / vocab. Parameters are created already sharded by jitting the initialiser with the
resulting out_shardings, so no host holds a full copy.
"""
from __future__ import annotations

import logging

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from coop_jax import models

AXES = ("data", "fsdp", "tensor")

LOGICAL_RULES: tuple[tuple[str, object], ...] = (
    ("batch", ("data", "fsdp")),
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("mlp", "tensor"),
    ("labels", None),
    ("layers", None),  # the stacked layer axis of `model.scan_layers`
    ("norm", None),
    ("seq", None),
    ("act_embed", None),
)


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
    """Per array of a batch dict: leading dim over (data, fsdp) when it divides evenly, else
    replicated (e.g. per-prompt arrays smaller than the data-parallel size)."""
    size = mesh.shape["data"] * mesh.shape["fsdp"]
    return {k: batch_sharding(mesh, np.ndim(v)) if np.shape(v)[0] % size == 0 else replicated(mesh)
            for k, v in batch.items()}


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


def maybe_initialize_distributed(enabled: bool) -> None:
    """Multi-host start-up: `jax.distributed.initialize()` reads the coordinator from the
    environment (TPU pods, SLURM, or COORDINATOR_ADDRESS/NUM_PROCESSES/PROCESS_ID)."""
    if not enabled:
        return
    jax.distributed.initialize()
    logging.info("jax.distributed: process %d of %d, %d global devices", jax.process_index(),
                 jax.process_count(), jax.device_count())
