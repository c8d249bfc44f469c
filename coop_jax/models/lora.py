"""LoRA (Hu et al. 2021): low-rank adapters on the decoder's projection matrices.

A targeted projection y = x W + b computes y = x W + b + (alpha / r) (x A) B, with A [in, r]
drawn as PEFT draws it (uniform in +-1/sqrt(in)) and B [r, out] = 0, so a model with fresh
adapters computes exactly what its base does. The adapters are parameters of the decoder
(`ModelConfig.lora`: leaves `lora_a`, `lora_b` beside the projection's `kernel`, with logical
axes derived from the kernel's, stacked on the layer axis with `scan_layers`); this module
splits a parameter tree into its frozen base and its trainable part, puts them back together
(a tree union: no arithmetic, the decoder applies the adapters in each layer), and merges the
adapters into the kernels for export.

The trainable part is the adapters, plus a reward model's new `score` head (as PEFT trains a
sequence classifier's head in full). Dropout on the adapters' input is not supported (a
ValueError): it needs a random key in every forward, and the step's old / reference log-probs
and the sampler would then each see another function than the one being trained.

Why not qwix (the JAX library Tunix uses for LoRA / QLoRA, 0.1.8 on PyPI): its LoRA wraps a Flax
module (`qwix.apply_lora_to_model`) and intercepts the `dot_general` / `einsum` calls of the
matched modules at apply time, creating the adapters inside that wrapped model. Here the
decoder is used as pure functions of a parameter pytree by the step, the sampler, the fused
log-prob kernels and the HF converters; the adapters must carry this package's logical axis
names (the (data, fsdp, tensor) rules), stack on `scan_layers`' layer axis, split off from a
frozen base for the optimizer, and merge for export. A small `nn.Dense` subclass
(`transformer.LoraDense`) and this module do all of that without a new dependency or an
interception layer inside `nn.scan` / `nn.remat`.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ADAPTERS = ("lora_a", "lora_b")
HEADS = ("score",)  # trained in full beside the adapters (a reward model's head)


@dataclasses.dataclass(frozen=True)
class LoraConfig:
    """rank r, alpha (the update is scaled by alpha / r), dropout (0 only), target projections."""
    rank: int
    alpha: float = 32.0
    dropout: float = 0.0
    targets: tuple[str, ...] = TARGETS

    def __post_init__(self):
        targets = self.targets
        if isinstance(targets, str):
            targets = tuple(t.strip() for t in targets.split(",") if t.strip())
        object.__setattr__(self, "targets", tuple(targets))
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise ValueError(f"LoraConfig.rank must be an integer >= 1, got {self.rank!r}")
        if not self.alpha > 0:
            raise ValueError(f"LoraConfig.alpha must be > 0, got {self.alpha!r}")
        if self.dropout != 0:
            raise ValueError(f"LoraConfig.dropout must be 0.0 (LoRA dropout is not supported), "
                             f"got {self.dropout!r}")
        unknown = [t for t in self.targets if t not in TARGETS]
        if unknown or not self.targets:
            raise ValueError(f"LoraConfig.targets must be a non-empty subset of {list(TARGETS)}, "
                             f"got {list(self.targets)}")

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


# A ~ U(-1/sqrt(in), 1/sqrt(in)): PEFT's kaiming_uniform(a=sqrt(5)) of its [r, in] weight
A_INIT = jax.nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")


def delta(x: jax.Array, a: jax.Array, b: jax.Array, scale: float, dtype) -> jax.Array:
    """scale * (x A) B in `dtype` (the projection's compute dtype), accumulated in float32.

    The leading dimensions are flattened into one: with two of them ([batch, seq]) the
    adapters' gradients contract over both, and XLA:CPU then materialises a transposed copy of
    every [tokens, out] output gradient; the gradient pass took 3.5x as long in a SwiGLU MLP
    (benchmarks/profile_gradient_pass.py). The reshape is free on every backend."""
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1]).astype(dtype)
    xa = jnp.dot(x2, a.astype(dtype), preferred_element_type=jnp.float32)
    out = jnp.dot(xa.astype(dtype), b.astype(dtype), preferred_element_type=jnp.float32)
    return (scale * out).astype(dtype).reshape(*lead, b.shape[-1])


def _partition(tree: dict, top_keys: tuple[str, ...]) -> tuple[dict, dict]:
    """(the rest, the adapter leaves and the top-level `top_keys` subtrees) of a nested dict."""
    def walk(node: dict, keys: tuple[str, ...]) -> tuple[dict, dict]:
        rest, picked = {}, {}
        for key, value in node.items():
            if key in ADAPTERS or key in keys:
                picked[key] = value
            elif isinstance(value, dict):
                r, p = walk(value, ())
                rest.update({key: r} if r else {})
                picked.update({key: p} if p else {})
            else:
                rest[key] = value
        return rest, picked

    return walk(tree, top_keys)


def split(params: dict, cfg) -> tuple[dict | None, dict]:
    """(frozen base, trainable) of a parameter tree (or a tree of its shardings / shapes) of the
    model `cfg`: the trainable part is the adapters and, for a reward model, its head; without
    `cfg.lora`, (None, params): everything trains."""
    if cfg.lora is None:
        return None, params
    return _partition(params, HEADS if cfg.is_reward_model else ())


def adapters(params: dict) -> dict:
    """The adapter leaves alone (`lora_a`, `lora_b`, at their paths)."""
    return _partition(params, ())[1]


def combine(base: dict | None, trainable: dict) -> dict:
    """The model's full parameter tree: `base` and `trainable` (disjoint) put together; with no
    base (no LoRA), `trainable` itself."""
    if base is None:
        return trainable
    out = dict(base)
    for key, value in trainable.items():
        nested = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = combine(out[key], value) if nested else value
    return out


def merge(params: dict, cfg) -> dict:
    """Plain parameters of the base architecture (`without(cfg)`): each kernel W with adapters
    becomes W + (alpha / r) A B (computed in float32, stored in W's dtype; stacked layer axes
    batch), the adapters dropped. The model of the result computes what `cfg` does on `params`
    up to rounding."""
    if cfg.lora is None:
        return params
    scale = cfg.lora.scale

    def walk(tree):
        if not isinstance(tree, dict):
            return tree
        out = {k: walk(v) for k, v in tree.items() if k not in ADAPTERS}
        if "lora_a" in tree:
            w = tree["kernel"]
            ab = jnp.matmul(tree["lora_a"].astype(jnp.float32), tree["lora_b"].astype(jnp.float32))
            out["kernel"] = (w.astype(jnp.float32) + scale * ab).astype(w.dtype)
        return out

    return walk(params)


def without(cfg):
    """The ModelConfig of the base model (no adapters)."""
    return cfg.replace(lora=None)


def count(tree: Any) -> int:
    return sum(x.size for x in jax.tree_util.tree_leaves(tree))
