"""Hugging Face models in and out.

    from coop_jax import hf
    lm = hf.load(path, dtype="float32")     # HF folder, .gguf file or Hub id (hf.sources)
    rm = hf.load(path, num_labels=1, keep_layers=4)  # RM from a causal LM: new head, 4 layers
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
import re
import shutil
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from coop_jax import models
from coop_jax.hf.convert import (hf_config_from_model_config, model_config_from_hf,
                                 params_from_hf, params_to_hf)
from coop_jax.hf.sources import local_folder, smollm2_gguf
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
    new_head: bool = False  # a causal LM loaded with num_labels: its score head is newly drawn

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
        from coop_jax.hf.tokenizer import load_tokenizer
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


_LAYER = re.compile(r"layers\.(\d+)\.")


def _wanted(name: str, num_layers: int) -> bool:
    """Whether a checkpoint tensor can be used by a model of `num_layers` layers."""
    layer = _LAYER.search(name)
    return layer is None or int(layer.group(1)) < num_layers


def _read_tensors(path: str, num_layers: int) -> dict[str, np.ndarray]:
    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    tensors: dict[str, np.ndarray] = {}
    if files:
        from safetensors import safe_open
        for f in files:
            with safe_open(f, framework="flax") as handle:
                for name in handle.keys():
                    if _wanted(name, num_layers):
                        tensors[name] = np.asarray(handle.get_tensor(name))
        return tensors
    bins = sorted(glob.glob(os.path.join(path, "pytorch_model*.bin")))
    if not bins:
        raise FileNotFoundError(f"{path} holds neither *.safetensors nor pytorch_model*.bin")
    import torch  # only for the legacy format
    for f in bins:
        for name, value in torch.load(f, map_location="cpu", weights_only=True).items():
            if _wanted(name, num_layers):
                tensors[name] = value.float().numpy()
    return tensors


def load(path: str, *, dtype: str = "float32", compute_dtype: str | None = None, mesh=None,
         num_labels: int | None = None, keep_layers: int | None = None,
         head_seed: int = 0, remat: bool = False, scan_layers: bool = False) -> HFModel:
    """Load a model of a registered family (`coop_jax.models.families`: Qwen2, Llama), as a
    causal LM or a sequence classifier.

    `path` is a local HF folder, a `.gguf` file or a Hub id (see `coop_jax.hf.sources`).
    `num_labels=None` keeps the checkpoint's head. `num_labels=1` on a causal-LM checkpoint
    builds a scalar-head reward model: the LM head is dropped and the new `score` head
    [hidden, 1] is drawn from N(0, initializer_range^2) (transformers' initialisation of a new
    `score`, std 0.02 when the config has none) with `jax.random.key(head_seed)`.
    `keep_layers=k` keeps only the first k decoder layers (the final norm and heads stay).
    With a `mesh`, parameters are placed directly with their named shardings. `remat` and
    `scan_layers` set those `ModelConfig` fields (`scan_layers` stacks the layers' tensors into
    the scanned layout; `save` unstacks them again).
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    folder = local_folder(path)
    config_path = os.path.join(folder, "config.json")
    if not os.path.isfile(config_path):
        raise FileNotFoundError(f"no config.json in {folder!r}")
    with open(config_path) as f:
        hf_config = json.load(f)
    cfg = model_config_from_hf(hf_config, param_dtype=dtype, dtype=compute_dtype)
    if keep_layers:
        if not 0 < keep_layers <= cfg.num_layers:
            raise ValueError(f"keep_layers must be in [1, {cfg.num_layers}] for {path!r}, got "
                             f"{keep_layers}")
        cfg = cfg.replace(num_layers=keep_layers)
    new_head = False
    if num_labels is not None and num_labels != cfg.num_labels:
        if cfg.num_labels or num_labels < 0:
            raise ValueError(f"{path!r} has num_labels={cfg.num_labels}; it cannot be loaded with "
                             f"num_labels={num_labels}")
        cfg, new_head = cfg.replace(num_labels=num_labels, tie_embeddings=False), True
    import flax.linen as nn
    abstract = nn.meta.unbox(models.abstract_params(cfg))
    tensors = _read_tensors(folder, cfg.num_layers)
    if new_head:
        std = float(hf_config.get("initializer_range", 0.02))
        head = abstract["score"]["kernel"]
        tensors["score.weight"] = np.asarray(
            std * jax.random.normal(jax.random.key(head_seed), head.shape, jnp.float32)).T
    params = params_from_hf(tensors, abstract, cfg.jnp_param_dtype)
    del tensors
    cfg = cfg.replace(remat=remat, scan_layers=scan_layers)
    if scan_layers:
        params = models.stack_layers(params, cfg.num_layers)
    if mesh is not None:
        from coop_jax.parallel import shard_params
        params = shard_params(params, cfg, mesh)
    else:
        params = jax.tree_util.tree_map(jnp.asarray, params)
    if keep_layers or new_head:
        hf_config = hf_config_from_model_config(cfg, hf_config, hf_config.get("pad_token_id"))
    has_tokenizer = any(os.path.exists(os.path.join(folder, f)) for f in TOKENIZER_FILES[:2])
    return HFModel(cfg, params, hf_config, source=folder if has_tokenizer else None,
                   new_head=new_head)


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
    tensors = params_to_hf(models.unstack_layers(lm.params) if lm.config.scan_layers
                           else lm.params)
    if lm.config.param_dtype == "bfloat16":  # numpy has no bf16: store via the flax writer
        from safetensors.flax import save_file as save_jax
        save_jax({k: jnp.asarray(v) for k, v in tensors.items()},
                 os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    else:
        save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(hf_config, f, indent=2, sort_keys=True)
    source = local_folder(lm.source) if lm.source else None  # a .gguf / Hub id: its folder
    if source and os.path.abspath(source) != os.path.abspath(out_dir):
        for name in TOKENIZER_FILES:
            src = os.path.join(source, name)
            if os.path.exists(src):
                shutil.copy(src, os.path.join(out_dir, name))


__all__ = ["HFModel", "from_params", "load", "local_folder", "model_config_from_hf", "save",
           "smollm2_gguf"]
