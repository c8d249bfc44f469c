"""Hugging Face <-> coop_jax conversion: config fields and parameter names.

What differs between families (model_type, architectures, bias keys, refused keys) is their
entry in `coop_jax.models.families.MODEL_FAMILIES`; everything here is shared by all of them.
"""
from __future__ import annotations

import json
from typing import Any

import jax
import numpy as np

from coop_jax.models.config import ModelConfig
from coop_jax.models.families import MODEL_FAMILIES, family_of_hf_model_type


def _rope_fields(hf: dict[str, Any]) -> tuple[float, dict | None]:
    """Rotary theta and scaling from either the transformers v5 `rope_parameters` or v4 keys."""
    params = dict(hf.get("rope_parameters") or {})
    theta = float(params.pop("rope_theta", hf.get("rope_theta", 10000.0)))
    scaling = params or dict(hf.get("rope_scaling") or {})
    kind = scaling.get("rope_type", scaling.get("type", "default")) if scaling else "default"
    if kind == "default":
        return theta, None
    return theta, {k: v for k, v in scaling.items() if k != "type"} | {"rope_type": kind}


def model_config_from_hf(hf: dict[str, Any], *, param_dtype: str = "float32",
                         dtype: str | None = None) -> ModelConfig:
    name = family_of_hf_model_type(hf.get("model_type"))
    family = MODEL_FAMILIES[name]
    refused = family.refused(hf)
    if refused:
        raise ValueError(f"config.json {refused}={json.dumps(hf[refused])} is not supported")
    arch = (hf.get("architectures") or [""])[0]
    num_labels = 0
    if arch.endswith("ForSequenceClassification"):
        num_labels = len(hf.get("id2label") or {}) or int(hf.get("num_labels", 1))
    theta, scaling = _rope_fields(hf)
    return ModelConfig(
        vocab_size=hf["vocab_size"], hidden_size=hf["hidden_size"],
        intermediate_size=hf["intermediate_size"], num_layers=hf["num_hidden_layers"],
        num_heads=hf["num_attention_heads"],
        num_kv_heads=hf.get("num_key_value_heads") or hf["num_attention_heads"],
        head_dim=hf.get("head_dim"), rope_theta=theta, rope_scaling=scaling,
        rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
        **family.switches_from_hf(hf),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        max_position_embeddings=hf.get("max_position_embeddings", 4096),
        num_labels=num_labels, family=name, param_dtype=param_dtype,
        dtype=dtype or param_dtype,
    )


def hf_config_from_model_config(cfg: ModelConfig, base: dict[str, Any] | None = None,
                                pad_token_id: int | None = None) -> dict[str, Any]:
    """A config.json dict for `cfg`; fields of `base` that coop_jax does not model are kept."""
    out = dict(base or {})
    family = MODEL_FAMILIES.lookup(cfg.family, "ModelConfig.family")
    rope = {"rope_theta": cfg.rope_theta, "rope_type": "default"}
    if cfg.rope_scaling_dict:
        rope.update(cfg.rope_scaling_dict)
    out.update(
        model_type=family.hf_model_type, architectures=[family.architecture(cfg.is_reward_model)],
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads, head_dim=cfg.dim_per_head,
        rms_norm_eps=cfg.rms_norm_eps, tie_word_embeddings=cfg.tie_embeddings,
        max_position_embeddings=cfg.max_position_embeddings, hidden_act="silu",
        rope_theta=cfg.rope_theta, rope_scaling=cfg.rope_scaling_dict, rope_parameters=rope,
        torch_dtype=cfg.param_dtype, dtype=cfg.param_dtype,
    )
    out.update(family.hf_keys(cfg))
    if cfg.is_reward_model:
        out["num_labels"] = cfg.num_labels
        out["id2label"] = {str(i): f"LABEL_{i}" for i in range(cfg.num_labels)}
        out["label2id"] = {f"LABEL_{i}": i for i in range(cfg.num_labels)}
    if pad_token_id is not None:
        out["pad_token_id"] = pad_token_id
    return out


def hf_name(path: tuple[str, ...]) -> tuple[str, bool]:
    """Our parameter path -> (HF tensor name, whether the matrix is transposed)."""
    leaf = path[-1]
    if path == ("embed_tokens", "embedding"):
        return "model.embed_tokens.weight", False
    if path[0] in ("lm_head", "score"):
        return f"{path[0]}.weight", True
    if path[0] == "norm":
        return "model.norm.weight", False
    if path[0] == "layers":
        raise ValueError("stacked (model.scan_layers=True) parameters have no per-layer HF names; "
                         "convert them with coop_jax.models.unstack_layers first")
    layer = path[0].removeprefix("layers_")
    name = "model.layers." + ".".join((layer,) + path[1:-1])
    if leaf == "kernel":
        return name + ".weight", True
    return f"{name}.{leaf}", False


def _path_keys(path) -> tuple[str, ...]:
    return tuple(p.key for p in path)


def params_from_hf(tensors: dict[str, np.ndarray], abstract: dict, dtype) -> dict:
    """Build our parameter tree (shapes from `abstract`) from HF-named tensors."""

    def fetch(path, leaf):
        name, transpose = hf_name(_path_keys(path))
        candidates = [name, name.removeprefix("model.")]
        found = next((c for c in candidates if c in tensors), None)
        if found is None:
            raise KeyError(f"checkpoint has no tensor {name!r}")
        value = np.asarray(tensors[found])
        value = value.T if transpose else value
        if value.shape != tuple(leaf.shape):
            raise ValueError(f"tensor {found!r} has shape {value.shape}, expected {leaf.shape}")
        return value.astype(dtype)

    return jax.tree_util.tree_map_with_path(fetch, abstract)


def params_to_hf(params: dict) -> dict[str, np.ndarray]:
    out = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        name, transpose = hf_name(_path_keys(path))
        value = np.asarray(jax.device_get(leaf))
        out[name] = np.ascontiguousarray(value.T if transpose else value)
    return out
