"""Models from a config's model sections (`model`, `reward_model`): shared by coop-train,
coop-train-rm and the experiments."""
from __future__ import annotations

import jax

from coop_jax import config as config_lib
from coop_jax import hf, models, parallel
from coop_jax.models import lora


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
        hint = ("; set config.cooper.rm_checkpoint (a trained VerifyRM) or "
                "config.reward_model.hf_path" if field == "reward_model" else "")
        raise ValueError(f"config.{field}.vocab_size ({section.vocab_size}) is smaller than the "
                         f"tokenizer ({len(tokenizer)} tokens){hint}")
    cfg = config_lib.model_config(section, num_labels=num_labels)
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
    lora_cfg = config_lib.lora_config(section)
    if lora_cfg is None:
        return cfg, params
    return add_adapters(cfg, params, lora_cfg, mesh, rng)
