"""`coop-train-rm`: build labelled (question, reference, completion) triples and train a VerifyRM.

Every setting is in the config's `rm_train` section (`--config.rm_train.x=y`;
`coop_jax/config.py`, `rm_train_section`):

    coop-train-rm --config.rm_train.mode=build_triples \
        (--config.rm_train.policy_checkpoint=DIR | --config.rm_train.policy_hf=PATH) \
        --config.rm_train.dataset=gsm8k --config.rm_train.data_dir=DATA_DIR \
        [--config.rm_train.samples_per_question=4 --config.rm_train.heldout_fraction=0.1 \
         --config.rm_train.heldout_out=HELD.jsonl --config.rm_train.judge_url=URL \
         --config.rm_train.judge_model=NAME] --config.rm_train.out=TRIPLES.jsonl
    coop-train-rm [--config=CFG.py --config.reward_model.hidden_size=...] \
        --config.rm_train.mode=train --config.rm_train.triples=TRAIN.jsonl \
        [--config.rm_train.heldout=HELD.jsonl] --config.rm_train.workdir=DIR \
        [--config.rm_train.init_hf=RM_DIR --config.rm_train.epochs=3 ...] \
        [--config.rm_train.export_hf=OUT_DIR]

Labels follow the paper's hybrid annotation (`rm_train.triples`). Training is
`rm_train.loop.train_reward_model`: DIR gets `checkpoints/` (readable by
`coop_jax.checkpoint.load_model(DIR, "rm")`, `coop-eval` and `rm.checkpoint`),
`rm_metrics.jsonl` and `rm_summary.json`. `configs/verifyrm.py` is the paper's recipe.
"""
from __future__ import annotations

import json
import os
from typing import Any

import jax
from absl.app import UsageError
from ml_collections import config_flags

from coop_jax import checkpoint, console, data, hf, parallel
from coop_jax import config as config_lib
from coop_jax.data.sources import check_data_files
from coop_jax.hf.sources import check_model_path
from coop_jax.hf.tokenizer import load_tokenizer, prepare_tokenizer
from coop_jax.rm.input import read_triples, write_triples
from coop_jax.rm.train import default_config
from coop_jax.rm.train.loop import config_mesh, train_reward_model
from coop_jax.rm.train.triples import build_triples, http_judge, label_balance, split_triples
from coop_jax.verify import RuleVerifier

DEFAULT_CONFIG = os.path.join(os.path.dirname(__file__), "default_config.py")


def define_flags(fv, argv: list[str]) -> None:
    config_flags.DEFINE_config_file("config", DEFAULT_CONFIG, "config file (default: the schema "
                                    "defaults); every coop-train-rm setting is in its rm_train "
                                    "section", flag_values=fv, sys_argv=argv)
    console.define_print_config(fv)


# ----------------------------------------------------------------------------- build_triples
def _load_policy(fv, r, config, mesh):
    """(ModelConfig, params, tokenizer, config, template default) of the sampling policy. Without
    --config, a coop-train checkpoint's own config applies (with the command line's overrides)."""
    saved_template = None
    if r.policy_hf:
        lm = hf.load(r.policy_hf, mesh=mesh)
        if lm.source is None:
            raise UsageError(f"config.rm_train.policy_hf {r.policy_hf!r} has no tokenizer files")
        cfg, params, tok = lm.config, lm.params, lm.source
    else:
        try:
            cfg, params, meta = checkpoint.load_model(r.policy_checkpoint, "policy", mesh=mesh)
        except (ValueError, FileNotFoundError) as e:
            raise UsageError(f"config.rm_train.policy_checkpoint {r.policy_checkpoint}: "
                             f"{e}") from e
        tok = meta.get("tokenizer") or ""
        if not fv["config"].present and isinstance(meta.get("config"), dict):
            config = config_lib.from_saved(meta["config"], default_config.get_config())
            config.update_from_flattened_dict(config_flags.get_override_values(fv["config"]))
            saved_template = config.data.prompt_template
    if cfg.is_reward_model:
        raise UsageError("the sampling policy must be a causal LM, got a reward model")
    return cfg, params, prepare_tokenizer(load_tokenizer(tok or None)), config, saved_template


def _check_build_flags(r) -> None:
    if bool(r.policy_checkpoint) == bool(r.policy_hf):
        raise UsageError("set exactly one of config.rm_train.policy_checkpoint and "
                         "config.rm_train.policy_hf")
    if not r.out:
        raise UsageError("config.rm_train.out is required (the triples JSONL)")
    if bool(r.judge_url) != bool(r.judge_model):
        raise UsageError("config.rm_train.judge_url and config.rm_train.judge_model go together")
    if r.heldout_fraction and not r.heldout_out:
        raise UsageError("config.rm_train.heldout_fraction needs config.rm_train.heldout_out")


def _check_build_paths(fv) -> None:
    """The policy and the data the command line names, before the policy loads (without --config
    a checkpoint's own config may name the dataset: then only the folder is checked here)."""
    config = fv.config
    r = config.rm_train
    check_model_path("config.rm_train.policy_hf", r.policy_hf)
    console.check_folder("config.rm_train.policy_checkpoint", r.policy_checkpoint)
    known = r.dataset or fv["config"].present or r.policy_hf
    check_data_files("config.rm_train.data_dir" if r.data_dir else "config.data.data_dir",
                             (r.dataset or config.data.dataset) if known else None,
                             r.data_dir or config.data.data_dir, {"config.rm_train.split": r.split})


def _load_records(config) -> tuple[str, list[dict]]:
    """(dataset, records) of `rm_train.dataset` (else `data.dataset`), split `rm_train.split`."""
    r = config.rm_train
    dataset = r.dataset or config.data.dataset
    if dataset not in data.DATASETS:
        raise UsageError(f"config.rm_train.dataset must be one of {list(data.DATASETS)}, got "
                         f"{dataset!r}")
    synthetic = (data.SyntheticConfig(**config.data.synthetic.to_dict())
                 if dataset == "synthetic" else None)
    try:
        return dataset, data.load_split(dataset, r.split,
                                        data_dir=r.data_dir or config.data.data_dir or None,
                                        num_examples=r.num_examples or None,
                                        seed=int(config.seed), synthetic=synthetic)
    except (ValueError, FileNotFoundError) as e:
        raise UsageError(f"config.rm_train.dataset={dataset} split={r.split}: {e}") from e


def _write_split(r, triples: list[dict], stats: dict) -> None:
    """Split by question, write both sides (process 0: every host holds every triple), count."""
    train, held = split_triples(triples, r.heldout_fraction, r.seed)
    primary = jax.process_index() == 0
    if primary:
        write_triples(r.out, train)
    if r.heldout_out:
        if primary:
            write_triples(r.heldout_out, held)
        stats["heldout"] = label_balance(held)
    stats["train"] = b = label_balance(train)
    print(f"triples: {b['num_triples']} ({b['num_positive']} positive, {b['num_negative']} "
          f"negative, {100 * b['positive_fraction']:.1f}% positive) -> {r.out}")


def _build_mode(fv) -> dict:
    config = fv.config
    _check_build_flags(config.rm_train)
    _check_build_paths(fv)
    mesh = config_mesh(config)
    cfg, params, tokenizer, config, saved_template = _load_policy(fv, config.rm_train, config,
                                                                  mesh)
    with console.usage_errors():  # the one conversion (of the checkpoint's config, if it chose)
        config = config_lib.typed(config)
    cfg = cfg.with_kernels(config.kernels.impl)
    r = config.rm_train
    dataset, records = _load_records(config)
    judge = None
    if r.judge_url:
        judge = http_judge(r.judge_url, r.judge_model, max_tokens=r.judge_max_tokens,
                           concurrency=r.judge_concurrency)
    template = r.template or saved_template or data.DEFAULT_TEMPLATES[dataset]
    with RuleVerifier(int(config.verifier.num_workers), float(config.verifier.timeout_s)) as v:
        triples, stats = build_triples(
            params, cfg, tokenizer, records, verifier=v, template=template, chat=r.chat,
            samples_per_question=r.samples_per_question, temperature=r.temperature,
            top_p=r.top_p, max_prompt_len=r.max_prompt_len or config.data.max_prompt_len,
            max_new_tokens=r.max_new_tokens or config.rollout.max_new_tokens,
            batch_size=config.eval.batch_size, seed=r.seed, judge=judge)
    if not triples:
        raise UsageError(f"no triples kept ({stats})")
    _write_split(r, triples, stats)
    if judge is not None:
        print(f"judge: {stats['judge/agree']} agree, {stats['judge/disagree']} disagree, "
              f"{stats['judge/no_verdict']} without a verdict (dropped)")
    return stats


# ----------------------------------------------------------------------------- train
def _train_mode(fv) -> dict:
    with console.usage_errors():  # the one conversion of the ConfigDict
        config = config_lib.typed(fv.config)
    r = config.rm_train
    for name in ("triples", "workdir"):
        if not getattr(r, name):
            raise UsageError(f"config.rm_train.{name} is required for rm_train.mode='train'")
    for name in ("triples", "heldout"):
        console.check_file(f"config.rm_train.{name}", getattr(r, name))
    check_model_path("config.rm_train.init_hf", r.init_hf)
    try:
        train = read_triples(r.triples)
        held = read_triples(r.heldout) if r.heldout else None
        summary = train_reward_model(config, train, r.workdir, heldout_triples=held)
    except ValueError as e:
        raise UsageError(str(e)) from e
    if jax.process_index() == 0:
        print(json.dumps(summary, indent=2))
    return summary


MODES = {"build_triples": _build_mode, "train": _train_mode}  # rm_train.mode -> its command


# the fields --help lists: every coop-train-rm setting
HELP_FIELDS = {k: v for k, v in config_lib.FIELD_DOCS.items() if k.startswith("rm_train.")}


def main(argv: list[str]) -> dict[str, Any]:
    """Parse `argv` (argv[0] is the program name) and run `config.rm_train.mode`
    (`--print_config`: print the config, return {})."""
    fv = console.parse_flags(define_flags, argv, __doc__, HELP_FIELDS)
    if fv.print_config:
        console.print_config(fv.config, config_lib.base_config(), config_lib.field_doc)
        return {}
    with console.usage_errors():
        config_lib.validate_rm_train(fv.config.rm_train)
    if fv.config.reward_model.lora.rank:
        raise UsageError("config.reward_model.lora.rank must be 0 for coop-train-rm: VerifyRM "
                         "training updates every parameter (LoRA applies to coop-train)")
    mode = fv.config.rm_train.mode
    parallel.maybe_initialize_distributed(fv.config.mesh)
    return MODES[mode](fv)


def run() -> None:
    """Console-script entry point."""
    console.run_console(main, "coop-train-rm")
