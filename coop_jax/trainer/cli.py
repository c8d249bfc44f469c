"""coop-train: GRPO-family RL with rule, RM (static / Cooper / hybrid) and label-free rewards.

    coop-train --config=configs/default.py --workdir=DIR [--config.rollout.group_size=16 ...]

Checks the config and the paths it names before JAX starts, then trains (`trainer.loop.train`)
and prints the run's summary. Resumes from the newest checkpoint in DIR; SIGTERM saves and exits.
"""
from __future__ import annotations

import json

import jax
from absl.app import UsageError

from coop_jax import config as config_lib
from coop_jax import console, parallel
from coop_jax.data.sources import check_data_files
from coop_jax.hf.sources import check_model_path
from coop_jax.trainer import rewards
from coop_jax.trainer.loop import train
from coop_jax.trainer.setup import validate_config


# ---------------------------------------------------------------------- the console script
def define_flags(fv, argv: list[str]) -> None:
    from absl import flags
    from ml_collections import config_flags

    config_flags.DEFINE_config_file(
        "config", None, "config file with a get_config() (configs/*.py); FILE:ARG passes ARG",
        lock_config=True, flag_values=fv, sys_argv=argv)
    flags.DEFINE_string("workdir", None, "run folder: checkpoints/, metrics.jsonl, summary.json; "
                        "a rerun resumes from its newest checkpoint", flag_values=fv)
    console.define_print_config(fv)


def check_paths(config: config_lib.Config) -> None:
    """UsageError naming the first data or model path of the run that does not exist (before
    JAX starts or anything loads)."""
    d, source = config.data, rewards.reward_source(config.reward.type)
    check_data_files("config.data.data_dir", d.dataset, d.data_dir, {
        "config.data.train_split": d.train_split, "config.data.eval_split": d.eval_split})
    check_model_path("config.model.hf_path", config.model.hf_path)
    check_model_path("config.model.tokenizer", config.model.tokenizer, tokenizer=True)
    if source.needs_rm:
        console.check_folder("config.rm.checkpoint", config.rm.checkpoint)
        if not config.rm.checkpoint:
            check_model_path("config.reward_model.hf_path", config.reward_model.hf_path)
        console.check_file("config.rm.heldout_triples", config.rm.heldout_triples)
    if source.trains_rm and config.cooper.negative == "rewrite":
        check_model_path("config.cooper.assistant_hf_path",
                                 config.cooper.assistant_hf_path)


def main(argv: list[str]) -> dict:
    """Parse `argv` (argv[0] is the program name), check the config and its paths before JAX
    starts, train, print and return the summary (`--print_config`: print the config, return {})."""
    fv = console.parse_flags(define_flags, argv, __doc__)
    config = fv.config
    if fv.print_config:
        console.print_config(config or config_lib.base_config(), config_lib.base_config(),
                             config_lib.field_doc)
        return {}
    if config is None or not fv.workdir:
        raise UsageError("--config (a config file, e.g. configs/default.py) and --workdir are "
                         "required")
    with console.usage_errors():  # the one conversion of the ConfigDict to the typed config
        config = validate_config(config_lib.typed(config))
    check_paths(config)
    console.log_with_times()
    parallel.maybe_initialize_distributed(config.mesh)
    with console.usage_errors():  # the mesh's and the hosts' checks
        validate_config(config, jax.device_count(), jax.process_count())
    summary = train(config, fv.workdir)
    if jax.process_index() == 0:
        print(json.dumps(summary, indent=2))
    return summary


def run() -> None:
    """Console entry point (`coop-train`)."""
    console.run_console(main, "coop-train")


if __name__ == "__main__":
    run()
