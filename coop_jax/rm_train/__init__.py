"""`coop-train-rm`: VerifyRM training on labelled (question, reference, completion) triples.

    triples.py         build / label (rule verifier + judge) / split / filter triples
    loop.py            train_reward_model: the training stages, RMState, its checkpoints
    options.py         the `rm_train` config section and its validation (no training code)
    cli.py             the command line (`run`, `main`)
    default_config.py  the config without --config

The names below load their module on first use, so `coop_jax.config` can import
`coop_jax.rm_train.options` without the training code. Triples files are read and written by
`coop_jax.rm_input` (`read_triples`, `write_triples`).
"""
from __future__ import annotations

from typing import Any

_EXPORTS = {
    "triples": ("JUDGE_SYSTEM_PROMPT", "build_triples", "drop_overlong", "http_judge",
                "judge_user_message", "label_balance", "label_triples", "parse_judge_verdict",
                "split_triples"),
    "loop": ("Progress", "RMSetup", "RMState", "TrainingData", "build_state", "input_format",
             "load_rm", "prepare_data", "rm_optimizer", "train_epochs", "train_reward_model"),
    "options": ("WEIGHT_DECAY_MASKS", "no_decay_on_bias_or_norm", "resolve", "rm_train_section",
                "validate_rm_train"),
    "cli": ("main", "run"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from coop_jax.rm_train import cli, loop, options, triples  # the training code, on first use
    return getattr({"cli": cli, "loop": loop, "options": options, "triples": triples}[module],
                   name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
