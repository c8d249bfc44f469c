"""Models from a config's model sections (`model`, `reward_model`): shared by coop-train,
coop-train-rm and the experiments."""
from __future__ import annotations

import jax

from coop_jax import hf, models, parallel
from coop_jax.models import lora
from coop_jax.models.config import ModelConfig
from coop_jax.models.lora import LoraConfig


def load_model(section, tokenizer, mesh, rng, *, num_labels: int = 0, hf_path: str = "",
               field: str = "model"):
    """(ModelConfig, sharded params, HFModel or None) from `hf_path` or `section.hf_path` (HF
    folder, .gguf or Hub id; with `num_labels=1` a causal LM gets a new scalar head, and
    `section.keep_layers` keeps its first k layers) or, without a path, a random model of the
    section's architecture. `field` names the section in errors."""
    path = hf_path or section.hf_path
    if path:
        lm = hf.load(path, dtype=section.param_dtype, compute_dtype=section.dtype, mesh=mesh,
                     num_labels=num_labels, keep_layers=section.keep_layers or None,
                     remat=section.remat,
                     scan_layers=section.scan_layers)
        if lm.config.num_labels != num_labels:
            raise ValueError(f"{path} has num_labels={lm.config.num_labels}, expected "
                             f"{num_labels}")
        return lm.config, lm.params, lm
    if len(tokenizer) > section.vocab_size:
        hint = ("; set config.rm.checkpoint (a trained VerifyRM) or "
                "config.reward_model.hf_path" if field == "reward_model" else "")
        raise ValueError(f"config.{field}.vocab_size ({section.vocab_size}) is smaller than the "
                         f"tokenizer ({len(tokenizer)} tokens){hint}")
    cfg = model_config(section, num_labels=num_labels)
    return cfg, parallel.sharded_init(cfg, rng, mesh), None


def add_adapters(cfg: models.ModelConfig, params, lora_cfg: lora.LoraConfig, mesh, rng):
    """(cfg with `lora_cfg`, `params` with fresh adapters beside their kernels): A random, B = 0
    (the model computes what `params` alone did), created in their shards on `mesh`."""
    cfg = cfg.replace(lora=lora_cfg)
    shardings = lora.adapters(parallel.param_shardings(cfg, mesh))
    init = jax.jit(lambda r: lora.adapters(models.init_params(cfg, r)), out_shardings=shardings)
    return cfg, lora.combine(params, init(rng))


def with_lora(section, cfg, params, mesh, rng):
    """(cfg, params), with fresh adapters (`models.lora`) when `section.lora.rank` > 0."""
    lora_cfg = lora_config(section)
    if lora_cfg is None:
        return cfg, params
    return add_adapters(cfg, params, lora_cfg, mesh, rng)


def model_config(section, vocab_size: int | None = None,
                 num_labels: int = 0) -> ModelConfig:
    """`ModelConfig` from an architecture section (not for `hf_path` sections)."""
    return ModelConfig(
        vocab_size=vocab_size or section.vocab_size, hidden_size=section.hidden_size,
        intermediate_size=section.intermediate_size, num_layers=section.num_layers,
        num_heads=section.num_heads, num_kv_heads=section.num_kv_heads,
        head_dim=section.head_dim or None, rope_theta=section.rope_theta,
        rms_norm_eps=section.rms_norm_eps, qkv_bias=section.qkv_bias,
        tie_embeddings=section.tie_embeddings and num_labels == 0,
        max_position_embeddings=section.max_position_embeddings, num_labels=num_labels,
        family=section.family, param_dtype=section.param_dtype, dtype=section.dtype,
        remat=section.remat, scan_layers=section.scan_layers)


def lora_config(section) -> LoraConfig | None:
    """The `LoraConfig` of a model section's `lora` sub-section; None when its rank is 0."""
    lora = section.lora
    if not lora.rank:
        return None
    return LoraConfig(rank=lora.rank, alpha=float(lora.alpha), dropout=lora.dropout,
                      targets=lora.targets)
