"""Optimisers and gradient steps shared by every trainer (RL, SFT, the RM): AdamW with a
warm-up and a schedule, one step on a loss, and gradient accumulation over micro-batches."""
from __future__ import annotations

from typing import Any

import re

import flax.struct
import jax
import jax.numpy as jnp
import optax

from coop_jax.registry import Registry


class ModelState(flax.struct.PyTreeNode):
    params: Any
    opt_state: Any


def _constant_schedule(learning_rate: float, warmup_steps: int, total_steps: int):
    del total_steps
    return optax.join_schedules([optax.linear_schedule(0.0, learning_rate, warmup_steps),
                                 optax.constant_schedule(learning_rate)], [warmup_steps])


def _cosine_schedule(learning_rate: float, warmup_steps: int, total_steps: int):
    return optax.warmup_cosine_decay_schedule(0.0, learning_rate, max(warmup_steps, 0),
                                              max(total_steps, warmup_steps + 1))


def _linear_schedule(learning_rate: float, warmup_steps: int, total_steps: int):
    """Linear decay from the peak to 0 at `total_steps` (the VerifyRM reference's schedule)."""
    decay = max(total_steps - warmup_steps, 1)
    return optax.join_schedules([optax.linear_schedule(0.0, learning_rate, warmup_steps),
                                 optax.linear_schedule(learning_rate, 0.0, decay)],
                                [warmup_steps])


# learning-rate schedules after a linear warm-up: (peak, warmup_steps, total_steps) -> schedule
SCHEDULES = Registry("optim.schedule", {"constant": _constant_schedule,
                                        "cosine": _cosine_schedule,
                                        "linear": _linear_schedule})


def make_optimizer(learning_rate: float, *, warmup_steps: int = 0, total_steps: int = 0,
                   schedule: str = "constant", weight_decay: float = 0.0,
                   weight_decay_mask: str = "all", b1: float = 0.9, b2: float = 0.999,
                   eps: float = 1e-8, grad_clip: float = 0.0) -> optax.GradientTransformation:
    """AdamW with linear warm-up then a `SCHEDULES` schedule, weight decay on the parameters
    `WEIGHT_DECAY_MASKS[weight_decay_mask]` selects, after global-norm clipping."""
    lr = SCHEDULES.lookup(schedule, "schedule")(learning_rate, warmup_steps, total_steps)
    mask = WEIGHT_DECAY_MASKS.lookup(weight_decay_mask)
    parts = [optax.clip_by_global_norm(grad_clip)] if grad_clip > 0 else []
    return optax.chain(*parts, optax.adamw(lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay,
                                           mask=mask))


def apply_gradients(model: ModelState, tx, grads) -> ModelState:
    updates, opt_state = tx.update(grads, model.opt_state, model.params)
    return ModelState(optax.apply_updates(model.params, updates), opt_state)


def gradient_step(loss_fn, model: ModelState, tx, *args) -> tuple[ModelState, Any, Any]:
    """One optimizer step on `loss_fn(params, *args) -> (loss, aux)`: (new state, aux, grads)."""
    (_, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(model.params, *args)
    return apply_gradients(model, tx, grads), aux, grads


def split_micro_batches(tree, micro_batches: int):
    """Rows [R, ...] -> [micro_batches, R / micro_batches, ...]; micro-batch k takes rows k,
    k + M, k + 2M, ...: each stays spread over the shards of a row-sharded batch."""
    return jax.tree_util.tree_map(
        lambda x: jnp.swapaxes(x.reshape((-1, micro_batches) + x.shape[1:]), 0, 1), tree)


def accumulate_gradients(loss_fn, params, micro) -> tuple[tuple[Any, Any], Any]:
    """((loss, aux), grads) of `loss_fn(params, micro_batch) -> (loss, aux)`, each summed over
    the leading axis of `micro` by `lax.scan`: one micro-batch's activations live at a time."""
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    first = jax.tree_util.tree_map(lambda x: x[0], micro)
    zeros = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype),
                                   jax.eval_shape(grad_fn, params, first))

    def body(total, micro_batch):
        return jax.tree_util.tree_map(jnp.add, total, grad_fn(params, micro_batch)), None

    return jax.lax.scan(body, zeros, micro)[0]


# Hugging Face Trainer's rule (`Trainer.get_decay_parameter_names`), on the parameter's path
_NO_DECAY = re.compile(r"bias|layernorm|rmsnorm|(?:^|\.)norm(?:$|\.)|_norm(?:$|\.)")


def _path_name(path) -> str:
    return ".".join(str(getattr(k, "key", getattr(k, "name", k))) for k in path).lower()


def no_decay_on_bias_or_norm(params):
    """The AdamW mask (True: decayed) that leaves out biases and norm weights: a parameter whose
    path matches HF Trainer's patterns (bias, layernorm, rmsnorm, norm, *_norm) is not decayed."""
    return jax.tree_util.tree_map_with_path(
        lambda path, _: _NO_DECAY.search(_path_name(path)) is None, params)


# rm_train.weight_decay_mask -> optax.adamw's `mask` (None: every parameter is decayed)
WEIGHT_DECAY_MASKS = Registry("rm_train.weight_decay_mask")
WEIGHT_DECAY_MASKS.register("all", None, doc="weight decay on every parameter (the RL optimiser)")
WEIGHT_DECAY_MASKS.register("no_bias_norm", no_decay_on_bias_or_norm)
