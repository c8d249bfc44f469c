"""The run setup of coop-train, public for the projects and benchmarks: the checks of a run's
config (`validate_config`), its records (`load_records`), models (`build_model`), the compiled
step's configuration (`step_config`), the policy's optimiser (the RM's is
`rm.optim.rm_optimizer`), and the rule verifiers of each role
(`extraction_roles`, `make_verifiers`, `rule_header`). `trainer.loop.Trainer` builds a run from
these; `trainer.cli` is the command line."""
from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import NamedTuple

from coop_jax import data, rl
from coop_jax import config as config_lib
from coop_jax.hf.build import load_model
from coop_jax.optim import make_optimizer
from coop_jax.rm import cooper
from coop_jax.trainer import evaluators, rewards
from coop_jax.trainer.step import StepConfig
from coop_jax.verify import RuleVerifier

log = logging.getLogger("coop_jax")


# ---------------------------------------------------------------------- the run's configuration
def check_multi_process(config, num_processes: int) -> None:
    """One line naming the setting that cannot run on `num_processes` hosts."""
    if num_processes == 1:
        return
    if config.rollout.prompts_per_step % num_processes:
        raise ValueError(f"rollout.prompts_per_step ({config.rollout.prompts_per_step}) must be "
                         f"a multiple of the number of processes ({num_processes})")
    if config.rl.dynamic_sampling:
        raise ValueError("rl.dynamic_sampling runs on one process only: hosts would draw "
                         "different numbers of refills (set rl.dynamic_sampling=False)")
    if (config.rollout.overlap and config.cooper.negative == "rewrite"
            and config.cooper.assistant_hf_path and not config.cooper.assistant_url):
        raise ValueError("rollout.overlap with a local rewrite assistant (cooper.assistant_hf_path)"
                         " runs on one process only: the sharded assistant's calls are collectives"
                         ", which the rollout thread cannot make (use cooper.assistant_url or "
                         "rollout.overlap=False)")
    if config.sft.steps and config.sft.batch_size % num_processes:
        raise ValueError(f"sft.batch_size ({config.sft.batch_size}) must be a multiple of the "
                         f"number of processes ({num_processes})")


def validate_config(config, device_count: int | None = None,
                    num_processes: int = 1) -> config_lib.Config:
    """The typed config (`config_lib.typed`: the schema checks each section as it builds it), or
    ValueError naming the first field a run cannot work with: the mesh against the devices, the
    reward type's rules, the negative strategy's, the evaluators' and the multi-process ones."""
    c = config_lib.typed(config, announce=False)
    if device_count is not None:
        c.check_devices(device_count)
    rewards.validate_config(c)
    cooper.validate_config(c, rewards.reward_source(c.reward.type).trains_rm)
    evaluators.validate(c.evals)
    check_lora(c)
    check_multi_process(c, num_processes)
    return c


def check_lora(config) -> None:
    """One line naming a LoRA setting (`model.lora`, `reward_model.lora`) the run cannot use."""
    source = rewards.reward_source(config.reward.type)
    if config.model.lora.rank and source.needs_teacher:
        raise ValueError(f"config.model.lora.rank must be 0 with reward.type="
                         f"{config.reward.type!r}: its EMA teacher averages the full policy's "
                         "parameters, not adapters")
    if config.reward_model.lora.rank and not source.trains_rm:
        raise ValueError(f"config.reward_model.lora.rank must be 0 with reward.type="
                         f"{config.reward.type!r}, which does not train the RM (LoRA on the RM "
                         f"is for {list(rewards.REWARD_SOURCES.where(lambda s: s.trains_rm))})")


class Records(NamedTuple):
    train: list[dict]
    heldout: list[dict]
    skipped: int  # rows dropped for an empty question or reference


def _valid_record(r: dict) -> bool:
    return all(isinstance(r.get(k), str) and r[k].strip() for k in ("question", "reference"))


def load_records(config) -> Records:
    """Train and held-out records; invalid rows (empty question / reference) dropped, counted."""
    d = config.data
    synthetic = None
    if d.dataset == "synthetic":
        synthetic = data.SyntheticConfig(**d.synthetic.to_dict())
    kw = dict(data_dir=d.data_dir or None, seed=config.seed, synthetic=synthetic)
    train = data.load_split(d.dataset, d.train_split, num_examples=(
        d.synthetic_train_size if d.dataset == "synthetic" else (d.num_train or None)), **kw)
    held_out = data.load_split(d.dataset, d.eval_split, num_examples=d.num_eval or None, **kw)
    valid_train = [r for r in train if _valid_record(r)]
    valid_eval = [r for r in held_out if _valid_record(r)]
    skipped = len(train) - len(valid_train) + len(held_out) - len(valid_eval)
    if skipped:
        log.warning("skipped %d records with an empty question or reference", skipped)
    if not valid_train:
        raise ValueError("no valid training records")
    return Records(valid_train, valid_eval, skipped)


def build_model(section, tokenizer, mesh, rng, num_labels: int = 0, *, kernels: str):
    """(ModelConfig, params) of a model section (see `coop_jax.hf.build.load_model`), the
    config running the kernels `kernels` (the run's `kernels.impl`)."""
    field = "reward_model" if num_labels else "model"
    cfg, params, _ = load_model(section, tokenizer, mesh, rng, num_labels=num_labels, field=field)
    return cfg.with_kernels(kernels), params


def tokenizer_path(config) -> str:
    return config.model.tokenizer or config.model.hf_path or ""


def step_config(config, policy_cfg, rm_cfg, valid_vocab: int) -> StepConfig:
    """The compiled step's static configuration: the step's own fields, and the options each
    part declared (the loss's `rl` section, the device reward's and the advantage estimator's
    parameters, the reward source's RM update and views)."""
    c, source = config, rewards.reward_source(config.reward.type)
    # Dr.GRPO's constant is the configured response length, not the batch's (cut by pad_buckets)
    loss = dataclasses.replace(rl.LossConfig.from_config(c.rl),
                               agg_max_len=c.rollout.max_new_tokens)
    return StepConfig(
        policy=policy_cfg, loss=loss, group_size=c.rollout.group_size,
        advantage=c.rl.advantage, advantage_options=rl.ADVANTAGES.options(c.rl.advantage, c),
        temperature=c.rollout.temperature, ppo_epochs=c.rl.ppo_epochs,
        num_minibatches=c.rl.num_minibatches, micro_batches=c.rl.micro_batches,
        kl_in_reward=c.rl.kl_in_reward, kl_coef_in_reward=c.rl.kl_coef,
        kl_controller=c.rl.kl_controller, kl_target=c.rl.kl_target,
        kl_horizon=float(c.rl.kl_horizon),
        kl_to_base=policy_cfg.lora is not None and (c.rl.kl_coef > 0 or c.rl.log_kl_to_start),
        log_kl_to_start=c.rl.log_kl_to_start,
        device_reward=source.device, reward_options=source.device.options_from_config(c),
        rm=rm_cfg, rm_update=source.rm_update_from_config(c), valid_vocab=valid_vocab,
        num_views=source.num_views, reuse_loss_forward=c.rl.reuse_loss_forward,
        share_prompt_prefix=c.rl.share_prompt_prefix)


def policy_optimizer(o: config_lib.Optim, total_steps: int):
    """The policy's AdamW: the `optim` section's schedule over the run's steps."""
    return make_optimizer(o.learning_rate, warmup_steps=o.warmup_steps,
                          total_steps=total_steps, schedule=o.schedule,
                          weight_decay=o.weight_decay, b1=o.b1, b2=o.b2, eps=o.eps,
                          grad_clip=o.grad_clip)


# ---------------------------------------------------------------------- evaluation
def headline_name(config) -> str:
    """The headline metric in words, e.g. "avg@8 (T=0.7, top-p 0.95)" or "greedy"."""
    e = config.eval
    if e.headline == "greedy":
        return "greedy"
    return f"avg@{e.k} (T={e.temperature:g}, top-p {e.top_p:g})"


def run_extraction_mode(config) -> str:
    """The run's answer extraction (`rewards.extraction_mode` of its verifier, reward, data)."""
    return rewards.extraction_mode(config.verifier.extraction, config.reward.type,
                                   config.data.dataset)


def extraction_roles(c) -> dict[str, str]:
    """The extraction mode of each rule the run uses: the rewards' ("reward",
    `run_extraction_mode`), the labels of Cooper's pairs ("pairs", `cooper.pair_labels`), the gold
    of the RM's on-policy diagnostics ("gold", `verifier.gold`); "auto" is the rewards'."""
    reward = run_extraction_mode(c)
    resolve = lambda mode: reward if mode == config_lib.AUTO_EXTRACTION else mode
    return {"reward": reward, "pairs": resolve(c.cooper.pair_labels),
            "gold": resolve(c.verifier.gold)}


def make_verifiers(c, stack: contextlib.ExitStack) -> dict[str, RuleVerifier]:
    """A verifier per role of `extraction_roles`, and the evaluation's ("eval"), one per distinct
    mode. Rewards match answers as `rewards.extraction_mode` says (the reference's mode for the
    reward type by default); held-out accuracy stays lenient so that runs of different reward
    types compare (the references' stricter scores are logged beside it: `strict_verifiers`)."""
    by_mode: dict[str, RuleVerifier] = {}

    def verifier(mode: str) -> RuleVerifier:
        if mode not in by_mode:
            by_mode[mode] = stack.enter_context(RuleVerifier(
                c.verifier.num_workers, c.verifier.timeout_s, extraction=mode))
        return by_mode[mode]

    roles = {role: verifier(mode) for role, mode in extraction_roles(c).items()}
    return roles | {"eval": verifier("lenient")}


def rule_header(c, trains_rm: bool, has_rm: bool) -> list[str]:
    """The run header's lines on its rules: which extraction labels the rewards, Cooper's pairs
    and the RM's diagnostics, and one line when the pairs' labeller is not the gold."""
    roles = extraction_roles(c)
    lines = [f"rule labels: {roles['reward']} (verifier.extraction={c.verifier.extraction})"]
    if trains_rm:
        lines.append(f"Cooper's pair labels: {roles['pairs']} "
                     f"(cooper.pair_labels={c.cooper.pair_labels})")
    if has_rm:
        lines.append(f"RM diagnostics against the gold: {roles['gold']} "
                     f"(verifier.gold={c.verifier.gold})")
    if trains_rm and roles["pairs"] != roles["gold"]:
        lines.append(f"NOTE: Cooper's pairs are labelled {roles['pairs']} but the run is "
                     f"measured against {roles['gold']}: the RM is not taught what the gold "
                     "rejects")
    return lines
