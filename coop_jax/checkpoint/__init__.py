"""Orbax checkpoints of the training state: atomic (written to a temporary directory and renamed
when complete), several kept, resumable with the live shardings, and readable piecewise (policy or
RM parameters alone, for export and evaluation)."""
from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
import orbax.checkpoint as ocp

from coop_jax import models

STATE_ITEMS = ("policy_params", "policy_opt_state", "ref_params", "rm_params", "rm_opt_state")


def _items(state) -> dict[str, Any]:
    """The saved items of `state`; `state.policy` may be None (a reward-model-only state, as
    written by `coop-train-rm`)."""
    items = {"ref_params": state.ref_params}
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
    d = dataclasses.asdict(cfg)
    d["rope_scaling"] = cfg.rope_scaling_dict
    return d


def model_config_from_dict(d: dict) -> models.ModelConfig:
    return models.ModelConfig(**d)


class Checkpointer:
    """`save(step, state, meta)` / `restore(state_like)`; `meta` is a JSON dict (data position,
    model configs, initial accuracy, ...)."""

    def __init__(self, directory: str, keep: int = 3, async_save: bool = False):
        self.directory = os.path.abspath(directory) if "://" not in directory else directory
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                               enable_async_checkpointing=async_save)
        self._manager = ocp.CheckpointManager(self.directory, options=options)

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
             force: bool = True) -> None:
        """`host_items`: further named trees of numpy arrays, read back by `load_host_item`."""
        args = {name: ocp.args.StandardSave(tree)
                for name, tree in (_items(state) | (host_items or {})).items()}
        args["meta"] = ocp.args.JsonSave(meta)
        self._manager.save(step, args=ocp.args.Composite(**args), force=force)
        self._manager.wait_until_finished()

    def restore(self, state, step: int | None = None):
        """(state with restored values and the shardings of `state`, meta) at `step` or latest."""
        step = self._step(step)
        items = _items(state)
        args = {name: ocp.args.StandardRestore(_abstract(tree)) for name, tree in items.items()}
        args["meta"] = ocp.args.JsonRestore()
        out = self._manager.restore(step, args=ocp.args.Composite(**args))
        policy = state.policy
        if policy is not None:
            policy = policy.replace(params=out["policy_params"],
                                    opt_state=out["policy_opt_state"])
        new = state.replace(step=jax.numpy.asarray(step, jax.numpy.int32),
                            policy=policy, ref_params=out.get("ref_params", state.ref_params))
        if state.rm is not None:
            new = new.replace(rm=state.rm.replace(params=out["rm_params"],
                                                  opt_state=out["rm_opt_state"]))
        return new, dict(out["meta"])

    def read_meta(self, step: int | None = None) -> dict:
        step = self._step(step)
        out = self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        return dict(out["meta"])

    def load_item(self, item: str, step: int | None = None):
        """One saved item (e.g. "policy_params") as arrays on the default device."""
        if item not in STATE_ITEMS:
            raise ValueError(f"item must be one of {STATE_ITEMS}, got {item!r}")
        step = self._step(step)
        # Target the default device explicitly: without a target orbax rebuilds the saved mesh
        # shardings, which fails in a process with another device layout (eval, export).
        from etils import epath
        tree = ocp.StandardCheckpointHandler().metadata(
            epath.Path(self.directory) / str(step) / item).tree
        device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        target = jax.tree_util.tree_map(
            lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device), tree)
        out = self._manager.restore(step, args=ocp.args.Composite(
            **{item: ocp.args.StandardRestore(target)}))
        return out[item]

    def load_host_item(self, item: str, step: int | None = None):
        """A tree saved through `save(host_items=...)`, as numpy arrays."""
        step = self._step(step)
        out = self._manager.restore(step, args=ocp.args.Composite(
            **{item: ocp.args.StandardRestore()}))
        return out[item]

    def close(self) -> None:
        self._manager.close()


def load_model(directory: str, which: str = "policy", step: int | None = None):
    """(ModelConfig, params, meta) of the policy or the RM saved by `coop-train` in `directory`
    (a workdir or its `checkpoints/` folder)."""
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
        return cfg, ckpt.load_item(f"{which}_params", step), meta
    finally:
        ckpt.close()
