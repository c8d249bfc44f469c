"""coop-train-rm's `rm_train` config section: its schema with defaults, its allowed names and its
validation. No training code: `coop_jax.config.base_config()` can build the section from here."""
from __future__ import annotations

import re

import jax
import ml_collections

from coop_jax.optim import SCHEDULES
from coop_jax.registry import Registry

MODES = Registry("rm_train.mode", {
    "build_triples": "sample a policy; label the completions by the rule verifier (and a judge)",
    "train": "train the RM with BCE on labelled triples"})
OVERLONG = Registry("rm_train.overlong", {
    "drop": "leave out triples over rm_train.max_chars characters (the reference)",
    "truncate": "keep them; the tokens are cut to max_len on reward_model.truncation_side"})

# Hugging Face Trainer's rule (`Trainer.get_decay_parameter_names`), on the parameter's path
_NO_DECAY = re.compile(r"bias|layernorm|rmsnorm|(?:^|\.)norm(?:$|\.)|_norm(?:$|\.)")


def _path_name(path) -> str:
    return ".".join(str(getattr(k, "key", getattr(k, "name", k))) for k in path).lower()


def no_decay_on_bias_or_norm(params):
    """The AdamW mask (True: decayed) that leaves out biases and norm weights: a parameter whose
    path matches HF Trainer's patterns (bias, layernorm, rmsnorm, norm, *_norm) is not decayed."""
    return jax.tree_util.tree_map_with_path(
        lambda path, _: _NO_DECAY.search(_path_name(path)) is None, params)


# rm_train.weight_decay_mask -> optax.adamw's `mask` (None: every parameter is decayed)
WEIGHT_DECAY_MASKS = Registry("rm_train.weight_decay_mask")
WEIGHT_DECAY_MASKS.register("all", None, doc="weight decay on every parameter (the RL optimiser)")
WEIGHT_DECAY_MASKS.register("no_bias_norm", no_decay_on_bias_or_norm)

# fields that must be > 0, and fields that may also be 0
_POSITIVE = ("epochs", "batch_size", "micro_batches", "max_chars", "log_every",
             "samples_per_question", "judge_concurrency", "judge_max_tokens", "learning_rate")
_NON_NEGATIVE = ("num_examples", "max_len", "max_prompt_len", "max_new_tokens", "heldout_every",
                 "checkpoint_every", "weight_decay", "grad_clip")
_FRACTIONS = ("warmup_ratio", "heldout_fraction")  # in [0, 1)


def rm_train_section() -> ml_collections.ConfigDict:
    """coop-train-rm's settings (`--config.rm_train.x=y`). 0 / "" mean "from the rest of the
    config" (lengths from data / rollout / cooper, dataset from data). The optimiser's values are
    the paper's VerifyRM ones; the batch and lengths are CPU-sized (`configs/verifyrm.py` is the
    paper's recipe, docs/ALGORITHMS.md §1 lists the differences)."""
    return ml_collections.ConfigDict(dict(
        mode="",  # build_triples | train
        # build_triples: sample a policy, label by the rule verifier (and an optional judge)
        policy_checkpoint="", policy_hf="", dataset="", data_dir="", split="train",
        num_examples=0, samples_per_question=4, temperature=1.0, top_p=1.0, template="",
        chat=False, max_prompt_len=0, max_new_tokens=0, out="", heldout_fraction=0.0,
        heldout_out="", judge_url="", judge_model="", judge_max_tokens=1024,
        judge_concurrency=8,
        # train: BCE on labelled triples
        triples="", heldout="", workdir="", init_hf="", export_hf="", epochs=3,
        learning_rate=2e-5, weight_decay=0.01, warmup_ratio=0.0, schedule="linear",
        grad_clip=1.0,
        # all: decay every parameter | no_bias_norm: not biases or norm weights (HF Trainer's rule,
        # the VerifyRM reference)
        weight_decay_mask="all",
        # batch_size rows per AdamW step, their gradient accumulated over micro_batches (lax.scan)
        batch_size=16, micro_batches=1,
        # overlong: drop (the reference: leave out triples over max_chars characters) | truncate
        # (keep them; the tokens keep their last max_len)
        overlong="drop", max_chars=8000,
        # True: references / completions over 1,500 characters keep their first 500 and last
        # 1,000 in training, as every RL-time input (rm_input.truncate_middle); False: whole texts
        # (the reference's training). Held-out evaluation always uses the RL-time input.
        char_cut=True,
        max_len=0, log_every=10,
        heldout_every=0,  # also evaluate the held-out triples every N steps (0: per epoch only)
        # a resumable checkpoint (parameters, AdamW state, data position) every N steps; a rerun on
        # the same workdir resumes from the latest (0: only the final, parameters-only one)
        checkpoint_every=50,
        seed=0))


def validate_rm_train(r: ml_collections.ConfigDict) -> None:
    """Raise ValueError naming the first impossible `rm_train` field."""
    for name, registry in (("mode", MODES), ("overlong", OVERLONG), ("schedule", SCHEDULES),
                           ("weight_decay_mask", WEIGHT_DECAY_MASKS)):
        registry.check(r[name], f"rm_train.{name}")
    for name in _POSITIVE:
        if not r[name] > 0:
            raise ValueError(f"config.rm_train.{name} must be > 0, got {r[name]!r}")
    for name in _NON_NEGATIVE:
        if r[name] < 0:
            raise ValueError(f"config.rm_train.{name} must be >= 0, got {r[name]!r}")
    for name in _FRACTIONS:
        if not 0 <= r[name] < 1:
            raise ValueError(f"config.rm_train.{name} must be in [0, 1), got {r[name]}")
    if not isinstance(r.char_cut, bool):
        raise ValueError(f"config.rm_train.char_cut must be True or False, got {r.char_cut!r}")


def resolve(section: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """`section` over `rm_train_section()`'s defaults, validated: a config whose rm_train section
    lacks a field (one built by a `config.base_config()` that predates it) gets its default."""
    full = rm_train_section()
    full.update(section.to_dict())
    validate_rm_train(full)
    return full
