"""Hugging Face models in and out.

    from coop_jax import hf
    lm = hf.load(path, dtype="float32")     # local folder: config.json + *.safetensors / *.bin
    lm.logits(token_ids)                     # [B, T] int -> [B, T, V] float32 (causal LMs)
    lm.scores(token_ids, attention_mask)     # -> [B] float32 (sequence-classification RMs)
    hf.save(lm, out_dir)                     # transformers' from_pretrained loads the folder
"""
from __future__ import annotations

import dataclasses
import functools
import glob
import json
import os
import shutil
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from coop_jax import models
from coop_jax.hf.convert import (hf_config_from_model_config, model_config_from_hf,
                                 params_from_hf, params_to_hf)
from coop_jax.models.config import DTYPES

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.json", "merges.txt", "generation_config.json", "chat_template.jinja")


@dataclasses.dataclass
class HFModel:
    """A model converted from (or exportable to) a Hugging Face folder."""
    config: models.ModelConfig
    params: dict
    hf_config: dict[str, Any]
    source: str | None = None  # folder holding the tokenizer files, if any

    def logits(self, token_ids, attention_mask=None) -> jax.Array:
        tokens = jnp.asarray(token_ids, jnp.int32)
        mask = jnp.ones(tokens.shape, bool) if attention_mask is None else jnp.asarray(attention_mask, bool)
        return _jit_logits(self.config)(self.params, tokens, mask)

    def scores(self, token_ids, attention_mask=None) -> jax.Array:
        tokens = jnp.asarray(token_ids, jnp.int32)
        mask = jnp.ones(tokens.shape, bool) if attention_mask is None else jnp.asarray(attention_mask, bool)
        return _jit_scores(self.config)(self.params, tokens, mask)

    def tokenizer(self):
        if self.source is None:
            raise ValueError("this model was not loaded from a folder with a tokenizer")
        from coop_jax.models.tokenizer import load_tokenizer
        return load_tokenizer(self.source)

    @property
    def pad_token_id(self) -> int | None:
        return self.hf_config.get("pad_token_id")


@functools.lru_cache(maxsize=16)
def _jit_logits(cfg):
    return jax.jit(lambda p, t, m: models.lm_logits(p, cfg, t, m))


@functools.lru_cache(maxsize=16)
def _jit_scores(cfg):
    return jax.jit(lambda p, t, m: models.reward_scores(p, cfg, t, m))


def _read_tensors(path: str) -> dict[str, np.ndarray]:
    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    tensors: dict[str, np.ndarray] = {}
    if files:
        from safetensors import safe_open
        for f in files:
            with safe_open(f, framework="flax") as handle:
                for name in handle.keys():
                    tensors[name] = np.asarray(handle.get_tensor(name))
        return tensors
    bins = sorted(glob.glob(os.path.join(path, "pytorch_model*.bin")))
    if not bins:
        raise FileNotFoundError(f"{path} holds neither *.safetensors nor pytorch_model*.bin")
    import torch  # only for the legacy format
    for f in bins:
        for name, value in torch.load(f, map_location="cpu", weights_only=True).items():
            tensors[name] = value.float().numpy()
    return tensors


def load(path: str, dtype: str = "float32", compute_dtype: str | None = None,
         mesh=None) -> HFModel:
    """Load a local HF folder (Qwen2 / Llama, causal LM or sequence classification).

    With a `mesh`, parameters are placed directly with their named shardings.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    config_path = os.path.join(path, "config.json")
    if not os.path.isfile(config_path):
        raise FileNotFoundError(f"no config.json in {path!r}")
    with open(config_path) as f:
        hf_config = json.load(f)
    cfg = model_config_from_hf(hf_config, param_dtype=dtype, dtype=compute_dtype)
    abstract = jax.tree_util.tree_map(lambda x: x, models.abstract_params(cfg))
    import flax.linen as nn
    params = params_from_hf(_read_tensors(path), nn.meta.unbox(abstract), cfg.jnp_param_dtype)
    if mesh is not None:
        from coop_jax.parallel import shard_params
        params = shard_params(params, cfg, mesh)
    else:
        params = jax.tree_util.tree_map(jnp.asarray, params)
    has_tokenizer = any(os.path.exists(os.path.join(path, f)) for f in TOKENIZER_FILES[:2])
    return HFModel(cfg, params, hf_config, source=path if has_tokenizer else None)


def from_params(cfg: models.ModelConfig, params: dict, *, tokenizer_dir: str | None = None,
                pad_token_id: int | None = None) -> HFModel:
    """Wrap coop_jax parameters (e.g. from an orbax checkpoint) for export."""
    return HFModel(cfg, params, hf_config_from_model_config(cfg, pad_token_id=pad_token_id),
                   source=tokenizer_dir)


def save(lm: HFModel, out_dir: str) -> None:
    """Write config.json + model.safetensors (+ the tokenizer files of the source folder)."""
    from safetensors.numpy import save_file
    os.makedirs(out_dir, exist_ok=True)
    hf_config = hf_config_from_model_config(lm.config, lm.hf_config, lm.pad_token_id)
    tensors = params_to_hf(lm.params)
    if lm.config.param_dtype == "bfloat16":  # numpy has no bf16: store via the flax writer
        from safetensors.flax import save_file as save_jax
        save_jax({k: jnp.asarray(v) for k, v in tensors.items()},
                 os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    else:
        save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(hf_config, f, indent=2, sort_keys=True)
    if lm.source and os.path.abspath(lm.source) != os.path.abspath(out_dir):
        for name in TOKENIZER_FILES:
            src = os.path.join(lm.source, name)
            if os.path.exists(src):
                shutil.copy(src, os.path.join(out_dir, name))


__all__ = ["HFModel", "from_params", "load", "model_config_from_hf", "save"]
