"""Orbax checkpoints of the training state: atomic (written to a temporary directory and renamed
when complete), several kept, resumable with the live shardings, and readable piecewise (policy or
RM parameters alone, for export and evaluation)."""
from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
import orbax.checkpoint as ocp
from orbax.checkpoint import checkpoint_managers
from orbax.checkpoint._src.metadata import array_metadata_store
from orbax.checkpoint._src.serialization import type_handler_registry

from coop_jax import models
from coop_jax.models import lora

# Replica-parallel saving splits a replicated array between its replicas, one compiled slice
# program per distinct shape and sharding: ~30 ms of compile per array on the first save of a
# process (4 s for the 1-layer Cooper state, 136 arrays), for nothing below a megabyte a replica.
# Large arrays still save in parallel; a checkpoint written either way restores the same values.
REPLICA_PARALLEL_MIN_BYTES = 1 << 20
type_handler_registry.GLOBAL_TYPE_HANDLER_REGISTRY.add(
    jax.Array, ocp.type_handlers.ArrayHandler(
        array_metadata_store=array_metadata_store.Store(),
        min_slice_bytes_for_replica_parallel=REPLICA_PARALLEL_MIN_BYTES),
    override=True, ignore_warnings=True)  # its warning would reach every command's stderr

STATE_ITEMS = ("policy_params", "policy_opt_state", "ref_params", "rm_params", "rm_opt_state",
               "policy_base", "rm_base", "kl_coef")


def _items(state, bases: tuple[str, ...] = ()) -> dict[str, Any]:
    """The saved items of a coop-train `TrainState`; `state.policy` may be None (a
    reward-model-only state). Under LoRA `policy_params` / `rm_params` are the trainable parts;
    `bases` names the frozen bases saved too ("policy_base", "rm_base")."""
    items = {"ref_params": state.ref_params} | {name: getattr(state, name) for name in bases}
    if getattr(state, "kl_coef", None) is not None:  # orbax saves trees, not a bare scalar
        items["kl_coef"] = {"coef": state.kl_coef}
    if state.policy is not None:
        items.update(policy_params=state.policy.params, policy_opt_state=state.policy.opt_state)
    if state.rm is not None:
        items.update(rm_params=state.rm.params, rm_opt_state=state.rm.opt_state)
    return {k: v for k, v in items.items() if v is not None}


def _abstract(tree):
    return jax.tree_util.tree_map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None)),
        tree)


def model_config_to_dict(cfg: models.ModelConfig) -> dict:
    d = cfg.saved_fields()
    d["rope_scaling"] = cfg.rope_scaling_dict
    return d


def model_config_from_dict(d: dict) -> models.ModelConfig:
    return models.ModelConfig(**d)


def _default_sharding() -> jax.sharding.Sharding:
    if jax.process_count() == 1:
        return jax.sharding.SingleDeviceSharding(jax.devices()[0])
    mesh = jax.sharding.Mesh(jax.devices(), ("all",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())


@dataclasses.dataclass
class ProtectedSteps(checkpoint_managers.PreservationPolicy):
    """Keeps the checkpoints of the steps it holds whatever their age (a monitor alarm's); steps
    join while the manager runs (`Checkpointer.protect`)."""
    steps: set[int] = dataclasses.field(default_factory=set)

    def should_preserve(self, checkpoints, *, context):
        del context
        return [c.step in self.steps for c in checkpoints]


class Checkpointer:
    """`save(step, state, meta)` / `restore(state_like)`; `meta` is a JSON dict (data position,
    model configs, initial accuracy, ...). The newest `keep` checkpoints are kept, and those of
    the steps given to `protect`."""

    def __init__(self, directory: str, keep: int = 3, async_save: bool = False):
        self.directory = os.path.abspath(directory) if "://" not in directory else directory
        self._protected = ProtectedSteps()
        policy = checkpoint_managers.AnyPreservationPolicy(
            [checkpoint_managers.LatestN(keep), self._protected])
        options = ocp.CheckpointManagerOptions(preservation_policy=policy, create=True,
                                               enable_async_checkpointing=async_save)
        self._manager = ocp.CheckpointManager(self.directory, options=options)

    def protect(self, step: int) -> None:
        """Never rotate out the checkpoint of `step` (saved, or to be saved) in this manager's
        life; a resumed run protects it again."""
        self._protected.steps.add(int(step))

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def _step(self, step: int | None) -> int:
        """`step`, or the latest one when None; FileNotFoundError without a checkpoint."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        return step

    def all_steps(self) -> list[int]:
        return list(self._manager.all_steps())

    def save(self, step: int, state, meta: dict, *, host_items: dict | None = None,
             force: bool = True, bases: tuple[str, ...] = ()) -> None:
        """`host_items`: further named trees of arrays (numpy, or global row arrays such as the
        pending rollouts), read back by `load_host_item` / `load_rows_item`; `bases`: the LoRA
        bases of `state` to save ("policy_base", "rm_base"; the others load from an hf_path)."""
        self.save_items(step, _items(state, bases) | (host_items or {}), meta, force=force)

    def save_items(self, step: int, items: dict[str, Any], meta: dict, *,
                   force: bool = True) -> None:
        """Named trees of arrays and the JSON `meta` as checkpoint `step` (a state of another
        trainer than coop-train's: e.g. coop-train-rm's `rm_params` / `rm_opt_state`, which
        `load_item` and `load_model(..., "rm")` read)."""
        args = {name: ocp.args.StandardSave(tree) for name, tree in items.items()}
        args["meta"] = ocp.args.JsonSave(meta)
        self._manager.save(step, args=ocp.args.Composite(**args), force=force)
        self._manager.wait_until_finished()

    def restore_items(self, items: dict[str, Any], step: int | None = None
                      ) -> tuple[dict[str, Any], dict]:
        """(the named trees saved at `step` or latest, restored with the shapes, dtypes and
        shardings of `items`; meta)."""
        step = self._step(step)
        args = {name: ocp.args.StandardRestore(_abstract(tree)) for name, tree in items.items()}
        args["meta"] = ocp.args.JsonRestore()
        out = self._manager.restore(step, args=ocp.args.Composite(**args))
        return {name: out[name] for name in items}, dict(out["meta"])

    def restore(self, state, step: int | None = None, bases: tuple[str, ...] = ()):
        """(state with restored values and the shardings of `state`, meta) at `step` or latest;
        `bases` as in `save`."""
        step = self._step(step)
        out, meta = self.restore_items(_items(state, bases), step)
        policy = state.policy
        if policy is not None:
            policy = policy.replace(params=out["policy_params"],
                                    opt_state=out["policy_opt_state"])
        new = state.replace(step=jax.numpy.asarray(step, jax.numpy.int32),
                            policy=policy, ref_params=out.get("ref_params", state.ref_params),
                            **{name: out[name] for name in bases})
        if "kl_coef" in out:
            new = new.replace(kl_coef=out["kl_coef"]["coef"])
        if state.rm is not None:
            new = new.replace(rm=state.rm.replace(params=out["rm_params"],
                                                  opt_state=out["rm_opt_state"]))
        return new, meta

    def read_meta(self, step: int | None = None) -> dict:
        step = self._step(step)
        out = self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        return dict(out["meta"])

    def _item_metadata(self, item: str, step: int):
        from etils import epath
        return ocp.StandardCheckpointHandler().metadata(
            epath.Path(self.directory) / str(step) / item).tree

    def _restore_item(self, item: str, step: int, sharding_of):
        """`item` restored onto `sharding_of(leaf metadata)` (or a tree of shardings): an explicit
        target, since without one orbax rebuilds the saved mesh shardings, which fails in a
        process with another device layout (eval, export)."""
        tree = self._item_metadata(item, step)
        shardings = sharding_of if not callable(sharding_of) else jax.tree_util.tree_map(
            sharding_of, tree)
        target = jax.tree_util.tree_map(
            lambda m, s: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=s), tree, shardings)
        out = self._manager.restore(step, args=ocp.args.Composite(
            **{item: ocp.args.StandardRestore(target)}))
        return out[item]

    def load_item(self, item: str, step: int | None = None, shardings=None):
        """One saved item (e.g. "policy_params"): with `shardings` (a matching tree, e.g.
        `parallel.param_shardings`) placed on them; else on the default device, or replicated
        over every device when several processes run (all of them must call)."""
        if item not in STATE_ITEMS:
            raise ValueError(f"item must be one of {STATE_ITEMS}, got {item!r}")
        if shardings is None:
            shardings = _default_sharding()
        return self._restore_item(item, self._step(step),
                                  (lambda _: shardings) if isinstance(
                                      shardings, jax.sharding.Sharding) else shardings)

    def load_rows_item(self, item: str, step: int | None = None):
        """A tree of global row arrays saved through `save(host_items=...)`, restored split over
        processes in process order (each host can read its rows with `parallel.host.local_rows`)."""
        from coop_jax.parallel import host
        return self._restore_item(item, self._step(step),
                                  lambda m: host.process_major_sharding(len(m.shape)))

    def load_host_item(self, item: str, step: int | None = None):
        """A tree saved through `save(host_items=...)`, as numpy arrays (one process)."""
        step = self._step(step)
        out = self._manager.restore(step, args=ocp.args.Composite(
            **{item: ocp.args.StandardRestore()}))
        return out[item]

    def close(self) -> None:
        self._manager.close()


def load_model(directory: str, which: str = "policy", step: int | None = None, mesh=None):
    """(ModelConfig, params, meta) of the policy or the RM saved by `coop-train` (or the RM saved
    by `coop-train-rm`: items `rm_params`, meta `rm_model_config`) in `directory`
    (a workdir or its `checkpoints/` folder); with `mesh`, the params are restored straight into
    their `parallel.param_shardings` on it (every process must call). A LoRA run's model comes
    back merged: the base architecture's config and plain parameters (`lora.merge`)."""
    if which not in ("policy", "rm"):
        raise ValueError(f"which must be 'policy' or 'rm', got {which!r}")
    if os.path.isdir(os.path.join(directory, "checkpoints")):
        directory = os.path.join(directory, "checkpoints")
    ckpt = Checkpointer(directory)
    try:
        meta = ckpt.read_meta(step)
        key = f"{which}_model_config"
        if key not in meta:
            raise ValueError(f"checkpoint in {directory} has no {which} model")
        cfg = model_config_from_dict(meta[key])
        shardings = None
        if mesh is not None:
            from coop_jax import parallel
            shardings = parallel.param_shardings(cfg, mesh)
        if cfg.lora is not None:
            return lora.without(cfg), _merged(ckpt, meta, which, cfg, step, mesh, shardings), meta
        return cfg, ckpt.load_item(f"{which}_params", step, shardings=shardings), meta
    finally:
        ckpt.close()


def _merged(ckpt: Checkpointer, meta: dict, which: str, cfg: models.ModelConfig, step, mesh,
            shardings):
    """A LoRA checkpoint's model with its adapters merged into the kernels (`lora.merge`): the
    trainable part from the checkpoint, the base from it too or from the hf_path in the meta
    (`{which}_base`), loaded with the run's settings of its model section."""
    base_sh, train_sh = lora.split(shardings, cfg) if shardings is not None else (None, None)
    trainable = ckpt.load_item(f"{which}_params", step, shardings=train_sh)
    source = meta.get(f"{which}_base", "checkpoint")
    if source == "checkpoint":
        base = ckpt.load_item(f"{which}_base", step, shardings=base_sh)
    else:
        from coop_jax import hf
        section = meta["config"]["model" if which == "policy" else "reward_model"]
        lm = hf.load(source, dtype=section["param_dtype"], compute_dtype=section["dtype"],
                     mesh=mesh, num_labels=cfg.num_labels,
                     keep_layers=section.get("keep_layers") or None, remat=cfg.remat,
                     scan_layers=cfg.scan_layers)
        base = lora.split(lm.params, cfg)[0]
    return jax.jit(lora.merge, static_argnums=1)(lora.combine(base, trainable), cfg)
