"""Where host-local rows become global arrays, and back: the one boundary between the host half of
a step (decoding, verification, rewards; per process) and the device half (one program over the
global mesh).

The row convention, on one process or many: every host holds a contiguous block of the global
batch, process i the i-th block (`coop_jax.data.PromptPipeline` hands each host that block of
the prompts). `global_rows` turns the blocks into one `jax.Array` with the sharding the device
code wants; `local_rows` gives a host its block of a global array back. When the mesh's device
order already puts process i's devices on block i (the usual case: `make_mesh` keeps JAX's
process-major device order), both are copies between host and local devices only; otherwise they
go through a process-major sharding and one device-side reshard.

Host-side values that describe all rows (metrics, evaluation rows) are combined with
`reduce_metrics` and `gather_json`, collectives every process must call in the same order.
"""
from __future__ import annotations

import functools
import json
import zlib
from typing import Any, Mapping

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P, Sharding

# host metrics that are counts over rows (summed over hosts); "time/" ones take the slowest host;
# every other metric is a mean over rows, and hosts hold equal numbers of rows
SUM_PREFIXES = ("pairs/", "dynamic/groups", "verifier_timeouts", "generated_tokens")
MAX_PREFIXES = ("time/",)


def row_block(num_local: int) -> slice:
    """This process's rows of a global batch made of `num_local` rows per process."""
    start = jax.process_index() * num_local
    return slice(start, start + num_local)


@functools.lru_cache(maxsize=None)
def _process_major_mesh() -> Mesh:
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    return Mesh(np.asarray(devices).reshape(jax.process_count(), -1), ("process", "local"))


def process_major_sharding(ndim: int) -> NamedSharding:
    """Rows split over processes in process order (each process's devices hold its block)."""
    return NamedSharding(_process_major_mesh(), P("process", *([None] * (ndim - 1))))


def _owns_own_block(sharding: Sharding, shape: tuple[int, ...]) -> bool:
    """Whether this process's devices hold exactly rows `row_block` (whole rows, no more)."""
    n = shape[0] // jax.process_count()
    want = row_block(n)
    starts, stops = set(), set()
    for index in sharding.addressable_devices_indices_map(shape).values():
        rows = range(shape[0])[index[0]]
        if any(range(d)[i] != range(d) for i, d in zip(index[1:], shape[1:])):
            return False  # sharded on a later dimension: a shard is not whole rows
        starts.add(rows.start)
        stops.add(rows.stop)
    covered = sorted(zip(sorted(starts), sorted(stops)))
    pos = want.start
    for start, stop in covered:
        if start != pos:
            return False
        pos = stop
    return pos == want.stop


def global_rows(local: np.ndarray, sharding: Sharding, parts: int = 1) -> jax.Array:
    """One global array from every host's block (`local`, equal shapes on every host).

    `parts` > 1: each host's block is `parts` equal parts (e.g. one per Co-rewarding view), and
    the global array holds part 0 of every host, then part 1 of every host, ... as one process
    holding all the rows would."""
    local = np.asarray(local)
    hosts = jax.process_count()
    shape = (local.shape[0] * hosts,) + local.shape[1:]
    if parts == 1 or hosts == 1:
        if _owns_own_block(sharding, shape):
            return jax.make_array_from_process_local_data(sharding, local, shape)
        staged = jax.make_array_from_process_local_data(process_major_sharding(local.ndim),
                                                        local, shape)
        return jax.device_put(staged, sharding)
    staging = process_major_sharding(local.ndim)
    staged = jax.make_array_from_process_local_data(staging, local, shape)
    part_major = np.arange(shape[0]).reshape(hosts, parts, -1).transpose(1, 0, 2).reshape(-1)
    return jax.device_put(_take_rows(part_major, staging)(staged), sharding)


@functools.lru_cache(maxsize=64)
def _take_rows_cached(order: bytes, sharding: Sharding):
    index = np.frombuffer(order, np.int64)
    return jax.jit(lambda x: x[index], out_shardings=sharding)


def _take_rows(order: np.ndarray, sharding: Sharding):
    return _take_rows_cached(np.asarray(order, np.int64).tobytes(), sharding)


def host_aligned(array: jax.Array) -> jax.Array:
    """`array` resharded (asynchronously) so that `local_rows` of it needs no communication."""
    if _owns_own_block(array.sharding, array.shape):
        return array
    return jax.device_put(array, process_major_sharding(array.ndim))


def local_rows(array) -> np.ndarray:
    """This process's block of a global array's rows (call `host_aligned` first, in the thread
    that dispatches device work, when the array's sharding may not be host-aligned)."""
    if not isinstance(array, jax.Array) or array.is_fully_addressable:
        return np.asarray(array)  # one process, or an array that is already this host's own
    if not _owns_own_block(array.sharding, array.shape):
        raise ValueError(f"an array of shape {array.shape} with sharding {array.sharding} is not "
                         "host-aligned; pass it through host_aligned first")
    shards = {}
    for shard in array.addressable_shards:
        shards.setdefault(range(array.shape[0])[shard.index[0]].start, shard.data)
    return np.concatenate([np.asarray(shards[k]) for k in sorted(shards)])


def row_sharding(mesh: Mesh, global_shape: tuple[int, ...]) -> NamedSharding:
    """Rows over the mesh's (data, fsdp) axes (all its axes on a mesh without them) when they
    divide evenly, else replicated (e.g. per-prompt arrays smaller than the data-parallel
    size)."""
    axes = tuple(a for a in ("data", "fsdp") if a in mesh.axis_names) or tuple(mesh.axis_names)
    if global_shape[0] % int(np.prod([mesh.shape[a] for a in axes])):
        return NamedSharding(mesh, P())
    return NamedSharding(mesh, P(axes, *([None] * (len(global_shape) - 1))))


def mesh_of(tree) -> Mesh | None:
    """The mesh a tree of arrays (e.g. parameters) lives on; None for single-device arrays."""
    for leaf in jax.tree_util.tree_leaves(tree):
        sharding = getattr(leaf, "sharding", None)
        if isinstance(sharding, NamedSharding):
            return sharding.mesh
    return None


def global_batch(tree, mesh: Mesh, parts: int = 1):
    """`global_rows` of every array of a tree of host rows (a dict, a `TrainBatch`, ...), each
    with its `row_sharding`, every host's block made of `parts` parts (None stays None)."""
    def one(local):
        local = np.asarray(local)
        shape = (local.shape[0] * jax.process_count(),) + local.shape[1:]
        return global_rows(local, row_sharding(mesh, shape), parts)
    return None if tree is None else jax.tree_util.tree_map(one, tree)


def gather_rows(local: np.ndarray) -> np.ndarray:
    """Every host's block, concatenated in process order, on every host."""
    local = np.asarray(local)
    if jax.process_count() == 1:
        return local
    from jax.experimental import multihost_utils
    return np.asarray(multihost_utils.process_allgather(local, tiled=True))


def fetch(tree):
    """A tree of (possibly sharded, multi-process) arrays as numpy arrays of their full global
    values, on every process (a collective when the arrays span processes)."""
    from jax.experimental import multihost_utils

    def one(leaf):
        if not isinstance(leaf, jax.Array) or leaf.is_fully_addressable or leaf.is_fully_replicated:
            return np.asarray(leaf)
        return np.asarray(multihost_utils.process_allgather(leaf, tiled=True))
    return jax.tree_util.tree_map(one, tree)


def gather_json(value: Any) -> list[Any]:
    """Every process's JSON-serialisable `value`, in process order, on every process."""
    if jax.process_count() == 1:
        return [value]
    data = np.frombuffer(json.dumps(value).encode(), np.uint8)
    sizes = gather_rows(np.asarray([data.size], np.int32))
    padded = np.zeros(int(sizes.max()), np.uint8)
    padded[:data.size] = data
    every = gather_rows(padded[None])
    return [json.loads(bytes(row[:n]).decode()) for row, n in zip(every, sizes)]


def any_process(flag: bool) -> bool:
    """True on every process when `flag` is True on any of them (e.g. a SIGTERM on one host)."""
    if jax.process_count() == 1:
        return bool(flag)
    return bool(gather_rows(np.asarray([int(flag)], np.int32)).max())


def reduce_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Host metrics of all rows of all hosts: counts summed, times maxed, means averaged.

    Every process must hold the same keys (the same code path computed them)."""
    keys = sorted(metrics)
    if jax.process_count() == 1:
        return dict(metrics)
    checksum = zlib.crc32(json.dumps(keys).encode()) % 2 ** 24  # exact in float32
    values = np.asarray([np.nan if metrics[k] is None else float(metrics[k]) for k in keys]
                        + [float(checksum)], np.float32)
    every = gather_rows(values[None])
    if np.any(every[:, -1] != every[0, -1]):
        raise RuntimeError(f"host metrics differ in their keys across processes (here: {keys})")
    out = {}
    for j, key in enumerate(keys):
        column = every[:, j].astype(np.float64)
        if np.isnan(column).all():
            out[key] = None
        elif key.startswith(SUM_PREFIXES):
            out[key] = float(column.sum())
        elif key.startswith(MAX_PREFIXES):
            out[key] = float(column.max())
        else:
            out[key] = float(column.mean())
    return out
