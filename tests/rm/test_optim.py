"""The RM's one optimiser builder (`rm.optim`): both trainers of the RM build their AdamW through
it, and each gets the updates its own builder gave before they were one."""
import ast
import math

import jax
import numpy as np
import optax
import pytest
from conftest import REPO

from coop_jax import config as config_lib
from coop_jax.optim import SCHEDULES, WEIGHT_DECAY_MASKS
from coop_jax.rm.optim import RMOptimizerSettings, rm_optimizer


# the two builders as they were (coop_jax/trainer/setup.py and coop_jax/rm/train/loop.py at
# b70cec4), pinned here to hold the one builder to their updates
def _cooper_before(cooper, steps: int):
    lr = SCHEDULES["constant"](cooper.learning_rate, math.ceil(cooper.warmup_ratio * steps),
                               steps)
    clip = [optax.clip_by_global_norm(cooper.grad_clip)] if cooper.grad_clip > 0 else []
    return optax.chain(*clip, optax.adamw(lr, b1=0.9, b2=0.999, eps=1e-8,
                                          weight_decay=cooper.weight_decay))


def _rm_training_before(opts, total_steps: int):
    lr = SCHEDULES[opts.schedule](opts.learning_rate, int(opts.warmup_ratio * total_steps),
                                  total_steps)
    mask = WEIGHT_DECAY_MASKS[opts.weight_decay_mask]
    clip = [optax.clip_by_global_norm(opts.grad_clip)] if opts.grad_clip > 0 else []
    return optax.chain(*clip, optax.adamw(lr, weight_decay=opts.weight_decay, mask=mask))


def _params():
    rng = np.random.default_rng(0)
    leaf = lambda *shape: rng.normal(size=shape).astype(np.float32)
    return {"embed_tokens": {"embedding": leaf(6, 4)},
            "layers_0": {"input_layernorm": {"weight": leaf(4)},
                         "self_attn": {"q_proj": {"kernel": leaf(4, 4), "bias": leaf(4)}}},
            "norm": {"weight": leaf(4)}, "score": {"kernel": leaf(4, 1)}}


def _trajectory(tx, steps: int = 12):
    """The parameters after each of `steps` updates on fixed pseudo-random gradients (large
    enough that the clip acts)."""
    params, rng = _params(), np.random.default_rng(1)
    state, out = tx.init(params), []
    for _ in range(steps):
        grads = jax.tree_util.tree_map(lambda p: 3 * rng.normal(size=p.shape).astype(p.dtype),
                                       params)
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
        out.append(jax.device_get(params))
    return out


def _assert_same(a, b):
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("warmup_ratio,grad_clip", [(0.0, 1.0), (0.25, 1.0), (0.25, 0.0)])
def test_coopers_rm_optimiser_gives_the_updates_it_gave(warmup_ratio, grad_clip):
    cooper = config_lib.Cooper(learning_rate=0.05, warmup_ratio=warmup_ratio, weight_decay=0.1,
                               grad_clip=grad_clip)
    settings = RMOptimizerSettings.for_cooper(cooper, steps=10)
    assert settings.warmup_steps == math.ceil(warmup_ratio * 10)  # 0.25 of 10: 3, rounded up
    _assert_same(_trajectory(rm_optimizer(settings)), _trajectory(_cooper_before(cooper, 10)))


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("mask", sorted(WEIGHT_DECAY_MASKS))
def test_coop_train_rms_optimiser_gives_the_updates_it_gave(schedule, mask):
    opts = config_lib.rm_train_section()
    opts.update(learning_rate=0.05, warmup_ratio=0.25, weight_decay=0.1, grad_clip=1.0,
                schedule=schedule, weight_decay_mask=mask)
    settings = RMOptimizerSettings.for_rm_training(opts, total_steps=10)
    assert settings.warmup_steps == 2  # 0.25 of 10, rounded down
    _assert_same(_trajectory(rm_optimizer(settings)),
                 _trajectory(_rm_training_before(opts, 10)))


def test_the_rm_has_one_optimiser_builder():
    """`rm_optimizer` is defined once, in rm/optim.py, and every RM optimiser is built by it:
    no other module of the package builds AdamW for the RM."""
    defined = [(p.relative_to(REPO).as_posix(), node.name)
               for p in sorted((REPO / "coop_jax").rglob("*.py"))
               for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
               if isinstance(node, ast.FunctionDef) and "optimizer" in node.name
               and node.name.startswith("rm")]
    assert defined == [("coop_jax/rm/optim.py", "rm_optimizer")]
    callers = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "coop_jax").rglob("*.py")
                     if "rm_optimizer(" in p.read_text(encoding="utf-8"))
    assert callers == ["coop_jax/rm/optim.py", "coop_jax/rm/train/loop.py",
                       "coop_jax/trainer/loop.py"]
