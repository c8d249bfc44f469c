"""`MODEL_FAMILIES`: the decoder families coop_jax reads from and writes to Hugging Face.

A family is a name (`ModelConfig.family`, `config.model.family`) for one HF architecture that the
one decoder in `coop_jax.models.transformer` computes exactly. The decoder never reads `family`:
it reads the switches in `ModelConfig` (biases, rope, tied embeddings, ...). A family decides only
how those switches come from an HF config.json and go back to one:

- import (`hf.convert.model_config_from_hf`): which family a config.json's `model_type` names,
  the bias switches the family fixes or reads from its own keys, and the keys it refuses;
- export (`hf.convert.hf_config_from_model_config`): the `model_type`, the `architectures` name
  (`hf_prefix` + "ForCausalLM" / "ForSequenceClassification") and the family's own bias keys.

Every other config.json field (sizes, heads, rope, norm eps, tied embeddings, labels) and every
tensor name is shared by all families (`hf.convert`).

Adding a family is one `MODEL_FAMILIES.register(name, ModelFamily(...))` here plus the parity
check in tests/hf/test_model_families.py, which runs every registered family against a tiny random
transformers model of its `hf_model_type`.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from coop_jax.registry import Registry

BIAS_SWITCHES = ("qkv_bias", "o_bias", "mlp_bias")  # ModelConfig fields a family may set


@dataclasses.dataclass(frozen=True)
class ModelFamily:
    """One HF architecture: its names and how the decoder's bias switches map to config.json.

    `qkv_bias`, `o_bias`, `mlp_bias` (the `ModelConfig` switches of the same names) are each
    either a bool the family fixes (not read on import, not written on export) or the
    config.json key that holds it (read as `bool(hf.get(key, False))`; written back on export,
    a key shared by several switches from the first of them in `BIAS_SWITCHES` order).
    `unsupported` are config.json keys naming features the decoder lacks: loading refuses a
    config where one is set (truthy).
    """

    hf_model_type: str  # config.json "model_type", read and written
    hf_prefix: str  # architectures = [hf_prefix + "ForCausalLM" | "ForSequenceClassification"]
    qkv_bias: bool | str = False
    o_bias: bool | str = False
    mlp_bias: bool | str = False
    unsupported: tuple[str, ...] = ("use_sliding_window",)

    def architecture(self, is_reward_model: bool) -> str:
        """The config.json `architectures` entry of a causal LM or a classifier."""
        return self.hf_prefix + ("ForSequenceClassification" if is_reward_model
                                 else "ForCausalLM")

    def switches_from_hf(self, hf: dict[str, Any]) -> dict[str, bool]:
        """The bias switches (ModelConfig kwargs) of config.json `hf`."""
        return {name: spec if isinstance(spec, bool) else bool(hf.get(spec, False))
                for name, spec in self._switches()}

    def hf_keys(self, cfg: Any) -> dict[str, bool]:
        """The family's own config.json keys for the ModelConfig `cfg` (the bias switches it
        does not fix). (No ModelConfig import: models.config imports this module.)"""
        out: dict[str, bool] = {}
        for name, spec in self._switches():
            if not isinstance(spec, bool):
                out.setdefault(spec, getattr(cfg, name))
        return out

    def refused(self, hf: dict[str, Any]) -> str | None:
        """The first `unsupported` key set in `hf`, or None."""
        return next((key for key in self.unsupported if hf.get(key)), None)

    def _switches(self):
        return ((name, getattr(self, name)) for name in BIAS_SWITCHES)


MODEL_FAMILIES: Registry[ModelFamily] = Registry("model.family")

MODEL_FAMILIES.register(
    "qwen2", ModelFamily(hf_model_type="qwen2", hf_prefix="Qwen2", qkv_bias=True),
    doc="Qwen2 / Qwen2.5: bias on q/k/v (always), none on o_proj or the MLP")
MODEL_FAMILIES.register(
    "llama", ModelFamily(hf_model_type="llama", hf_prefix="Llama", qkv_bias="attention_bias",
                         o_bias="attention_bias", mlp_bias="mlp_bias"),
    doc="Llama 3.x (and SmolLM2): attention_bias (q/k/v/o) and mlp_bias from config.json")


def family_of_hf_model_type(model_type: Any) -> str:
    """The registered family whose `hf_model_type` is `model_type`; ValueError naming the
    config.json field otherwise."""
    for name, family in MODEL_FAMILIES.items():
        if family.hf_model_type == model_type:
            return name
    raise ValueError(f"config.json model_type must be one of {hf_model_types()}, got "
                     f"{model_type!r}")


def hf_model_types() -> tuple[str, ...]:
    """The config.json `model_type`s the registered families read, in registration order."""
    return tuple(f.hf_model_type for f in MODEL_FAMILIES.values())
