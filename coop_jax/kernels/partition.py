"""Running the Pallas kernels on a device mesh: ``jax.shard_map`` around every Mosaic/Triton call.

XLA cannot partition a Mosaic or Triton custom call, so each kernel runs per shard:
  * rows (tokens) are split like the batch: over the mesh axes of ``hidden``'s own sharding
    (explicit meshes) or of the ``"batch"`` logical rule (``coop_jax.sharding_rules.LOGICAL_RULES``);
  * the unembedding [D, V] is gathered over D and either replicated or split over its
    vocabulary: the mesh axes of its own sharding or of the ``"vocab"`` rule, when they divide
    V. Axes that would split neither evenly are dropped (that dimension stays replicated);
  * with a split vocabulary every shard returns partials over its columns (global ids from
    ``offsets``), combined across shards with an all-gather of [shards, rows] statistics:
    online log-sum-exp / entropy statistics and the target logit, the Gumbel-max winner and the
    top-k candidates; the backward psums dh over the vocabulary shards and dW over the row shards.
The mesh is the ambient one (``jax.set_mesh``) or the one the arrays are committed to.
"""
from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from coop_jax.kernels import _common
from coop_jax.sharding_rules import LOGICAL_RULES

ROWS, COLS, REPLICATED = "rows", "cols", "replicated"  # how an argument is laid out


class Layout(NamedTuple):
    mesh: Any  # jax.sharding.Mesh or AbstractMesh
    rows: tuple[str, ...]  # mesh axes splitting the rows
    vocab: tuple[str, ...]  # mesh axes splitting the unembedding's columns

    def spec(self, kind: str) -> P:
        rows, vocab = self.rows or None, self.vocab or None
        return {ROWS: P(rows), COLS: P(None, vocab), REPLICATED: P()}[kind]

    def size(self, axes: tuple[str, ...]) -> int:
        return math.prod(self.mesh.shape[a] for a in axes)


def _names(entry) -> tuple[str, ...]:
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, (tuple, list)) else (entry,)


def _mesh(*arrays: jax.Array):
    """The ambient mesh, else the first non-empty mesh the arrays' avals carry, else None."""
    meshes = [jax.sharding.get_abstract_mesh()]
    meshes += [getattr(getattr(jax.typeof(x), "sharding", None), "mesh", None) for x in arrays]
    for mesh in meshes:
        if mesh is not None and not mesh.empty:
            # inside a shard_map (manual axes) the arrays are already per-shard
            return None if AxisType.Manual in mesh.axis_types else mesh
    return None


def _rule(name: str, mesh) -> tuple[str, ...]:
    axes = dict(LOGICAL_RULES).get(name)
    return tuple(a for a in _names(axes) if a in mesh.axis_names)


def _dividing(axes: tuple[str, ...], mesh, extent: int) -> tuple[str, ...]:
    """The longest prefix of ``axes`` (size-1 axes dropped) whose product divides ``extent``."""
    kept = []
    for a in axes:
        if mesh.shape[a] > 1 and extent % (math.prod(mesh.shape[k] for k in kept)
                                           * mesh.shape[a]) == 0:
            kept.append(a)
        elif mesh.shape[a] > 1:
            break
    return tuple(kept)


def _spec_entry(x: jax.Array, dim: int) -> tuple[str, ...]:
    spec = getattr(getattr(jax.typeof(x), "sharding", None), "spec", None)
    return _names(spec[dim]) if spec is not None and len(spec) > dim else ()


def layout(hidden: jax.Array, unembed: jax.Array) -> Layout | None:
    """How ``hidden`` [N, D] and ``unembed`` [D, V] are split for the kernels; None off-mesh."""
    mesh = _mesh(hidden, unembed)
    if mesh is None:
        return None
    vocab = _dividing(_spec_entry(unembed, 1) or _rule("vocab", mesh), mesh, unembed.shape[1])
    rows = tuple(a for a in _spec_entry(hidden, 0) or _rule("batch", mesh) if a not in vocab)
    return Layout(mesh, _dividing(rows, mesh, hidden.shape[0]), vocab)


def resolve_impl(impl: str, hidden: jax.Array, unembed: jax.Array, interpret: Any = False,
                 backend: str | None = None) -> str:
    """The concrete impl the fused kernels run for these arrays (``_common.resolve_impl``, on
    mesh when ``layout`` finds one). Callers that also size things by impl resolve once with
    this and pass the result, so ``auto`` cannot resolve two ways."""
    return _common.resolve_impl(impl, interpret, layout(hidden, unembed) is not None, backend)


def unsplit_vocab(unembed: jax.Array) -> jax.Array:
    """``unembed`` with an explicitly sharded vocabulary gathered, for the xla path: its scan
    slices vocab tiles and contracts dh over them, which explicit sharding cannot leave split."""
    sharding = getattr(jax.typeof(unembed), "sharding", None)
    spec = getattr(sharding, "spec", None)
    if spec is None or len(spec) < 2 or spec[1] is None:
        return unembed
    return jax.sharding.reshard(unembed, NamedSharding(sharding.mesh, P(spec[0], None)))


def local_columns(lay: Layout | None, num_rows: int, num_cols: int, valid_vocab: int
                  ) -> tuple[jax.Array, int]:
    """(int32[2] global index of this shard's first row and column, static bound on the local
    columns worth computing). Call inside ``run``'s function, with the local shapes."""
    if lay is None or not (lay.rows or lay.vocab):
        return jnp.zeros((2,), jnp.int32), min(num_cols, valid_vocab)
    index = lambda axes: lax.axis_index(axes) if axes else 0
    offsets = jnp.stack([index(lay.rows) * num_rows, index(lay.vocab) * num_cols])
    return offsets.astype(jnp.int32), min(num_cols, valid_vocab)


def run(lay: Layout | None, fn: Callable, args: tuple, kinds: tuple[str, ...], out_kinds):
    """``fn(*args)`` per shard. ``kinds`` lays out each argument, ``out_kinds`` each output (a
    pytree prefix of kinds). Off-mesh, just ``fn(*args)``."""
    if lay is None:
        return fn(*args)
    in_specs = tuple(lay.spec(k) for k in kinds)
    out_specs = jax.tree_util.tree_map(lay.spec, out_kinds)
    if AxisType.Explicit in lay.mesh.axis_types:  # shard_map wants inputs already in place
        args = tuple(jax.sharding.reshard(x, NamedSharding(lay.mesh, s))
                     for x, s in zip(args, in_specs))
    return jax.shard_map(fn, mesh=lay.mesh, in_specs=in_specs, out_specs=out_specs,
                         check_vma=False)(*args)


def like(x: jax.Array, ref: jax.Array) -> jax.Array:
    """``x`` resharded like ``ref`` on an explicit mesh (a cotangent must match its primal)."""
    sharding = getattr(jax.typeof(ref), "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    if mesh is None or mesh.empty or AxisType.Explicit not in mesh.axis_types:
        return x
    return jax.sharding.reshard(x, sharding)


def combine_vocab(lay: Layout | None, partials, merge: Callable):
    """Inside ``run``: stack each partial over the vocabulary shards (new leading axis, lowest
    vocabulary first) and ``merge`` them; unchanged when the vocabulary is not split."""
    if lay is None or not lay.vocab:
        return partials
    return merge(*jax.tree_util.tree_map(lambda x: lax.all_gather(x, lay.vocab), partials))


def psum(lay: Layout | None, x: jax.Array, which: str) -> jax.Array:
    """Inside ``run``: sum ``x`` over the row (``ROWS``) or vocabulary (``COLS``) shards."""
    axes = () if lay is None else {ROWS: lay.rows, COLS: lay.vocab}[which]
    return lax.psum(x, axes) if axes else x
