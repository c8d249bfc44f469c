"""coop-train: GRPO-family RL with rule, RM (static / Cooper / hybrid) and label-free rewards.

    coop-train --config=configs/default.py --workdir=DIR [--config.rollout.group_size=16 ...]

One step (docs/ALGORITHMS.md, docs/ARCHITECTURE.md), in the order `Trainer.run` calls it:
  before_step   the reward source's per-step hook (Co-rewarding-II: EMA teacher update)
  sample        G rollouts per prompt (KV-cache sampler), per trained view, plus teacher rollouts
  score         rule verifier (process pool) and the reward source's host function
  pairs         Cooper only: (positive, negative) pairs for the RM update (`cooper.build_pairs`)
  update        one compiled step (`train_step`): rewards on device, advantages, policy (and RM)
  log / eval / checkpoint
With `rollout.overlap` (one-step off-policy, `RolloutFeed`), the rollouts of step t+1 are sampled by
the parameters update t starts from, and their host half (score, pairs) runs in a thread while the
device updates.
Resumes from the newest checkpoint in DIR; SIGTERM saves and exits.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import math
import os
import signal
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import tqdm

from coop_jax import checkpoint, cooper, data, parallel, rewards, rl, sampling, sft
from coop_jax import config as config_lib
from coop_jax.build import load_model
from coop_jax.eval.evaluate import evaluate_policy
from coop_jax.eval.report import plot_curves
from coop_jax.metrics_writer import MetricWriter, read_metrics
from coop_jax.models.tokenizer import load_tokenizer, prepare_tokenizer, stop_token_ids
from coop_jax.rm_input import read_triples, rm_input_format, trained_input_format
from coop_jax.rm_scoring import evaluate_reward_model
from coop_jax.train_step import (StepConfig, init_state, jit_step, make_optimizer, place_state,
                                 state_shardings)
from coop_jax.verify import RuleVerifier

log = logging.getLogger("coop_jax")


# ---------------------------------------------------------------------- setup from the config
def _valid_record(r: dict) -> bool:
    return all(isinstance(r.get(k), str) and r[k].strip() for k in ("question", "reference"))


def load_records(config) -> tuple[list[dict], list[dict], int]:
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
    return valid_train, valid_eval, skipped


def build_model(section, tokenizer, mesh, rng, num_labels: int = 0):
    """(ModelConfig, params) of a model section (see `coop_jax.build.load_model`)."""
    field = "reward_model" if num_labels else "model"
    return load_model(section, tokenizer, mesh, rng, num_labels=num_labels, field=field)[:2]


def _tokenizer_path(config) -> str:
    return config.model.tokenizer or config.model.hf_path or ""


def step_config(config, policy_cfg, rm_cfg, valid_vocab: int) -> StepConfig:
    """The compiled step's static configuration (and its loss's) from the config sections."""
    c, source = config, rewards.reward_source(config.reward.type)
    loss = rl.LossConfig(
        clip_eps_low=c.rl.clip_eps_low, clip_eps_high=c.rl.clip_eps_high,
        clip_ratio_c=c.rl.clip_ratio_c or None, ratio_level=c.rl.ratio_level,
        aggregation=c.rl.aggregation, kl_coef=0.0 if c.rl.kl_in_reward else c.rl.kl_coef,
        kl_estimator=c.rl.kl_estimator, entropy_coef=c.rl.entropy_coef)
    return StepConfig(
        policy=policy_cfg, loss=loss, group_size=c.rollout.group_size, advantage=c.rl.advantage,
        temperature=c.rollout.temperature, ppo_epochs=c.rl.ppo_epochs,
        num_minibatches=c.rl.num_minibatches, kl_in_reward=c.rl.kl_in_reward,
        reward_source=source.device, rm=rm_cfg, rm_threshold=c.reward.threshold,
        hybrid_rm_weight=c.reward.hybrid_rm_weight, train_rm=source.trains_rm,
        kernel_impl=c.kernels.impl, valid_vocab=valid_vocab, num_views=source.num_views,
        kl_coef_in_reward=c.rl.kl_coef, rm_skip_no_pair=c.cooper.no_pair_step == "skip",
        micro_batches=c.rl.get("micro_batches", 1),
        rm_micro_batches=c.cooper.get("micro_batches", 1))


def policy_optimizer(config):
    o = config.optim
    return make_optimizer(o.learning_rate, warmup_steps=o.warmup_steps,
                          total_steps=config.train.steps, schedule=o.schedule,
                          weight_decay=o.weight_decay, b1=o.b1, b2=o.b2, eps=o.eps,
                          grad_clip=o.grad_clip)


def rm_optimizer(config):
    """Cooper's RM AdamW: linear warm-up over `warmup_ratio` of the run, then constant."""
    c, steps = config.cooper, config.train.steps
    return make_optimizer(c.learning_rate, warmup_steps=math.ceil(c.warmup_ratio * steps),
                          total_steps=steps, weight_decay=c.weight_decay, grad_clip=c.grad_clip)


def _load_reward_model(config, tokenizer, mesh, key):
    """(ModelConfig, params, tokenizer) of the RM: a trained checkpoint (`cooper.rm_checkpoint`)
    or `reward_model` (HF path or random architecture)."""
    rm_path = config.cooper.rm_checkpoint
    if rm_path:
        rm_cfg, params, meta = checkpoint.load_model(rm_path, "rm", mesh=mesh)
        run_fmt = dataclasses.asdict(rm_input_format(config))
        for key, trained in trained_input_format(meta.get("config", {})).items():
            if trained is not None and trained != run_fmt[key] and not (
                    key == "template" and run_fmt["question_format"] == "question"):
                log.warning("the RM in %s was trained with input %s=%s, this run uses %s",
                            rm_path, key, trained, run_fmt[key])
        rm_tokenizer = load_tokenizer(meta.get("rm_tokenizer", meta.get("tokenizer")) or None)
        return rm_cfg, params, rm_tokenizer
    section = config.reward_model
    if not section.hf_path:
        log.warning("reward model starts from random weights (no reward_model.hf_path or "
                    "cooper.rm_checkpoint)")
    rm_cfg, params = build_model(section, tokenizer, mesh, jax.random.fold_in(key, 2),
                                 num_labels=1)
    return rm_cfg, params, load_tokenizer(section.hf_path) if section.hf_path else tokenizer


# ---------------------------------------------------------------------- the run's state
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


class Trainer:
    """One run's state: config, mesh, tokenizers, records, models, optimizer state, the compiled
    step and the checkpointer. The step's stages are the functions below; `run()` is the loop."""

    def __init__(self, config, workdir: str):
        self.config, self.workdir = config, workdir
        os.makedirs(workdir, exist_ok=True)
        parallel.maybe_initialize_distributed(config.mesh)
        config_lib.validate(config, jax.device_count())
        check_multi_process(config, jax.process_count())
        self.mesh = parallel.make_mesh(
            config_lib.resolve_mesh_shape(config.mesh.shape, jax.device_count()))
        self.source = rewards.reward_source(config.reward.type)
        self.G, self.B = config.rollout.group_size, config.rollout.prompts_per_step
        self.tokenizer = prepare_tokenizer(load_tokenizer(_tokenizer_path(config) or None))
        self.train_records, self.eval_records, self.skipped_rows = load_records(config)
        if self.source.num_views > 1:  # the second view must exist on every record
            data.sources.check_rephrased(self.train_records, config.data.dataset,
                                         config.data.rephrase_field, config.data.data_dir)
        key = jax.random.key(config.seed)
        self.policy_cfg, policy_params = build_model(config.model, self.tokenizer, self.mesh,
                                                     jax.random.fold_in(key, 1))
        self.valid_vocab = min(len(self.tokenizer), self.policy_cfg.vocab_size)
        self.ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"),
                                            keep=config.train.keep_checkpoints)
        self.resuming = self.ckpt.latest_step() is not None
        if config.sft.steps and not self.resuming:
            params, losses = sft.warm_start_from_config(policy_params, self.policy_cfg,
                                                        self.tokenizer, self.train_records, config)
            log.info("SFT warm start: %d steps, loss %.3f -> %.3f", len(losses), losses[0],
                     losses[-1])
            policy_params = jax.device_put(params, parallel.param_shardings(self.policy_cfg,
                                                                            self.mesh))
        self.rm_cfg = rm_params = self.rm_tokenizer = self.rm_tx = None
        if self.source.needs_rm:
            self.rm_cfg, rm_params, self.rm_tokenizer = _load_reward_model(
                config, self.tokenizer, self.mesh, key)
            self.rm_tx = rm_optimizer(config)
        self.tx = policy_optimizer(config)
        # Co-rewarding-II: the EMA teacher is also the KL reference.
        needs_ref = config.rl.kl_coef > 0 or self.source.needs_teacher
        ref = jax.tree_util.tree_map(jnp.copy, policy_params) if needs_ref else None
        self.state = place_state(init_state(policy_params, self.tx, ref_params=ref,
                                            rm_params=rm_params, rm_tx=self.rm_tx), self.mesh)
        self.state_shardings = state_shardings(self.state)
        self.step_cfg = step_config(config, self.policy_cfg, self.rm_cfg, self.valid_vocab)
        self.step_fn = None  # compiled on the first batch (its per-array shardings)
        self.sample = sampling.make(self.policy_cfg, sampling.SamplingConfig(
            temperature=config.rollout.temperature, top_k=config.rollout.top_k,
            top_p=config.rollout.top_p, num_samples=self.G, eos_ids=stop_token_ids(self.tokenizer),
            pad_id=self.tokenizer.pad_token_id, valid_vocab=self.valid_vocab,
            kernel_impl=config.kernels.impl, max_new_tokens=config.rollout.max_new_tokens))

    def update(self, batch: dict):
        """The compiled step on this host's rows of the batch, made global arrays; built on first
        use with explicit state and batch shardings."""
        views = {k: self.source.num_views for k in VIEW_FIELDS if k in batch}
        batch = parallel.host.global_batch(batch, self.mesh, parts=views)
        if self.step_fn is None:
            self.step_fn = jit_step(self.step_cfg, self.tx, self.rm_tx,
                                    state_shardings=self.state_shardings,
                                    batch_sharding={k: v.sharding for k, v in batch.items()},
                                    replicated=parallel.replicated(self.mesh),
                                    donate=self.config.train.nan_policy == "error")
        return self.step_fn(self.state, batch)

    def meta(self, step: int, extra: dict) -> dict:
        meta = {"step": step, "config": self.config.to_dict(),
                "tokenizer": _tokenizer_path(self.config),
                "policy_model_config": checkpoint.model_config_to_dict(self.policy_cfg)}
        if self.rm_cfg is not None:
            meta["rm_model_config"] = checkpoint.model_config_to_dict(self.rm_cfg)
        return meta | extra

    def run(self) -> dict:
        return run_loop(self)


@dataclasses.dataclass
class HostTools:
    """Host-side helpers that live for the loop's duration."""
    verifier: RuleVerifier
    background: concurrent.futures.ThreadPoolExecutor  # rule labels that nothing waits on
    rewriter: Callable | None = None                    # a negative strategy's assistant


@dataclasses.dataclass
class Samples:
    """A step's sampler outputs, device arrays that may still be being computed."""
    outs: list                             # sampling.Rollouts, one per trained view
    teacher: sampling.Rollouts | None = None  # the EMA teacher's (needs_teacher)


@dataclasses.dataclass
class Rollouts:
    outs: list            # sampler outputs, one per trained view
    texts: list           # their decoded texts
    teacher: list | None  # the EMA teacher's decoded rollouts (needs_teacher)


# ---------------------------------------------------------------------- one step's stages
def _prompts(config, tokenizer, records, question_key="question") -> list[str]:
    return [data.format_prompt(config.data.prompt_template, r[question_key] or r["question"],
                               tokenizer=tokenizer, chat=config.data.chat_template)
            for r in records]


def _view_keys(run: Trainer) -> tuple[str, ...]:
    """The record field each trained view's prompt is built from."""
    return ("question", run.config.data.rephrase_field)[:run.source.num_views]


def _rollout_key(run: Trainer, step: int, draw: int = 0):
    return jax.random.fold_in(jax.random.fold_in(jax.random.key(run.config.seed), step), draw)


def _generate(run: Trainer, params, records, key, question_key="question") -> sampling.Rollouts:
    """Rollouts of every host's prompts, as global arrays each host can read its rows of."""
    ids, mask = sampling.tokenize_prompts(run.tokenizer, _prompts(run.config, run.tokenizer, records,
                                                              question_key),
                                      run.config.data.max_prompt_len)
    prompts = parallel.host.global_batch({"ids": ids, "mask": mask}, run.mesh)
    out = run.sample(params, prompts["ids"], prompts["mask"], key)
    return jax.tree_util.tree_map(parallel.host.host_aligned, out)


def sample_rollouts(run: Trainer, records: list[dict], key, params=None) -> Samples:
    """G rollouts of every prompt under `params` (default: the current policy), one set per view,
    and, where the reward needs it, under the EMA teacher. Only dispatched: the device computes
    them while the caller goes on."""
    params = run.state.policy.params if params is None else params
    outs = [_generate(run, params, records, jax.random.fold_in(key, view), question_key)
            for view, question_key in enumerate(_view_keys(run))]
    teacher = None
    if run.source.needs_teacher:
        teacher = _generate(run, run.state.ref_params, records, jax.random.fold_in(key, 2))
    return Samples(outs, teacher)


def decode_rollouts(run: Trainer, samples: Samples) -> Rollouts:
    """This host's rows of the samples, and their texts (waits for the sampler)."""
    local = lambda out: jax.tree_util.tree_map(parallel.host.local_rows, out)
    decode = lambda out: sampling.decode_texts(run.tokenizer, out)
    outs = [local(out) for out in samples.outs]
    teacher = None if samples.teacher is None else decode(local(samples.teacher))
    return Rollouts(outs, [decode(out) for out in outs], teacher)


def score_rollouts(run: Trainer, records: list[dict], rollouts: Rollouts, tools: HostTools):
    """Rule labels and the reward source's host rewards.

    Returns (host rewards per view, labels, extracted answers, pending, metrics): `pending` is a
    future of rule labels that no reward waits for (verified while the device updates).
    """
    texts = rollouts.texts[0]
    references = [records[i // run.G]["reference"] for i in range(len(texts))]
    metrics, pending, labels, extracted = {}, None, None, None
    if run.source.uses_rule_labels:
        labels, extracted, timeouts = rewards.rule_labels(tools.verifier, references, texts)
        metrics.update(rule_accuracy=labels.mean(), verifier_timeouts=timeouts)
    else:
        pending = tools.background.submit(rewards.rule_labels, tools.verifier, references, texts)
    host_rewards, host_metrics = run.source.host(rewards.RewardInputs(
        records, rollouts.texts, labels, extracted, rollouts.teacher, run.G, tools.verifier))
    return host_rewards, labels, extracted, pending, metrics | host_metrics


def _view_batch(run: Trainer, out, host_rewards: np.ndarray) -> dict:
    c = run.config
    lengths, truncated = np.asarray(out.lengths), np.asarray(out.truncated)
    shaped, loss_weight = rl.apply_overlong(
        c.rl.overlong, jnp.asarray(host_rewards), jnp.asarray(lengths), jnp.asarray(truncated),
        max_len=c.rollout.max_new_tokens, cache_len=c.rl.overlong_cache_len,
        factor=c.rl.overlong_factor)
    batch = {"prompt_tokens": np.asarray(out.prompt_tokens),
             "prompt_mask": np.asarray(out.prompt_mask), "tokens": np.asarray(out.tokens),
             "mask": np.asarray(out.mask), "rewards": host_rewards.astype(np.float32),
             "reward_bonus": np.asarray(shaped, np.float32) - host_rewards.astype(np.float32),
             "loss_weight": np.asarray(loss_weight, np.float32)}
    if c.rollout.overlap:  # the PPO ratio's old log-probs: the behaviour policy is one step old
        batch["behaviour_logprobs"] = np.asarray(out.logprobs, np.float32)
        if out.entropy is not None:  # else the step recomputes them (older pending rollouts)
            batch["behaviour_entropy"] = np.asarray(out.entropy, np.float32)
    return batch


# the fields `make_batch` concatenates over the trained views (view-major)
VIEW_FIELDS = ("prompt_tokens", "prompt_mask", "tokens", "mask", "rewards", "reward_bonus",
               "loss_weight", "behaviour_logprobs", "behaviour_entropy")


def make_batch(run: Trainer, records, rollouts: Rollouts, host_rewards, labels, pending) -> dict:
    """The compiled step's batch: every view's rows, then the RM's inputs of view 0."""
    views = [_view_batch(run, out, r) for out, r in zip(rollouts.outs, host_rewards)]
    assert set(views[0]) <= set(VIEW_FIELDS), set(views[0]) - set(VIEW_FIELDS)
    batch = {k: np.concatenate([v[k] for v in views]) for k in views[0]}
    if run.rm_cfg is not None:
        rows = [(records[i // run.G]["question"], records[i // run.G]["reference"], t)
                for i, t in enumerate(rollouts.texts[0])]
        batch["rm_tokens"], batch["rm_mask"] = rm_input_format(run.config).tokenize(
            run.rm_tokenizer, rows)
        if pending is None:
            batch["rule_labels"] = labels
    return batch


def rm_pairs(run: Trainer, step: int, records, texts, labels, extracted, tools: HostTools):
    """Cooper: one (positive, negative) pair per prompt, tokenised for the RM update."""
    c = run.config
    pairs, stats = cooper.build_pairs(
        c.cooper.negative, records, texts, labels, extracted, run.G, verifier=tools.verifier,
        rewriter=tools.rewriter, seed=(c.seed, step),
        first_prompt=jax.process_index() * len(records), tries=c.cooper.rewrite_tries)
    return cooper.tokenize_pairs(run.rm_tokenizer, records, pairs, rm_input_format(c)), stats


def collect(run: Trainer, step: int, records: list[dict], tools: HostTools, draw: int = 0):
    """Rollouts of the current policy, then the host half of the step (`prepare_batch`)."""
    samples = sample_rollouts(run, records, _rollout_key(run, step, draw))
    return prepare_batch(run, step, records, samples, tools)


def prepare_batch(run: Trainer, step: int, records: list[dict], samples: Samples,
                  tools: HostTools):
    """The host half of one step, from its samples: decoded texts, rewards, the batch and (for
    Cooper) pairs.

    Returns (batch, metrics, pending); `pending` as in `score_rollouts`.
    """
    t0 = time.perf_counter()
    rollouts = decode_rollouts(run, samples)
    t1 = time.perf_counter()
    host_rewards, labels, extracted, pending, metrics = score_rollouts(run, records, rollouts,
                                                                       tools)
    metrics.update({"time/sample": t1 - t0, "time/verify": time.perf_counter() - t1})
    batch = make_batch(run, records, rollouts, host_rewards, labels, pending)
    if run.source.trains_rm:
        t0 = time.perf_counter()
        pair_batch, pair_stats = rm_pairs(run, step, records, rollouts.texts[0], labels,
                                          extracted, tools)
        batch.update(pair_batch)
        metrics.update(pair_stats)
        metrics["time/pairs"] = time.perf_counter() - t0
    out = rollouts.outs[0]
    metrics.update(response_length=float(np.asarray(out.lengths).mean()),
                   truncated_fraction=float(np.asarray(out.truncated).mean()),
                   generated_tokens=int(np.asarray(out.mask).sum()))
    return batch, metrics, pending


def collect_informative(run: Trainer, step: int, pipeline, tools: HostTools):
    """DAPO dynamic sampling: drop groups whose rewards are all equal, refill from further
    prompts (at most rl.dynamic_max_draws draws)."""
    draw_metrics = []

    def draw():
        batch, metrics, _ = collect(run, step, pipeline.next_batch(), tools,
                                    draw=len(draw_metrics))
        draw_metrics.append(metrics)
        return {k: v.reshape((run.B, run.G) + v.shape[1:]) for k, v in batch.items()}

    groups, stats = rl.fill_batch(draw, run.B, run.config.rl.dynamic_max_draws)
    batch = {k: v.reshape((run.B * run.G,) + v.shape[2:]) for k, v in groups.items()}
    return batch, draw_metrics[0] | {f"dynamic/{k}": v for k, v in stats.items()}


PENDING_ROLLOUTS = "pending_rollouts"  # the checkpoint item of rollout.overlap's next batch


@dataclasses.dataclass
class _Ahead:
    """rollout.overlap's next batch while it is being prepared."""
    step: int
    data_state: dict  # the prompt pipeline's position before its prompts
    samples: Samples
    prepared: concurrent.futures.Future  # of prepare_batch's (batch, metrics, pending)


class RolloutFeed:
    """Where each step's batch comes from.

    By default in series: the step samples with the current policy, then runs its host half.
    With `rollout.overlap` (one step off-policy, as verl's and TRL's async modes): `next(t)` hands
    over batch t, sampled by the parameters update t-1 started from and prepared in a thread while
    the device ran update t-1; then it dispatches the sampling of batch t+1 with the current
    parameters (before update t donates them) and prepares it in the thread while update t runs.
    Step 0 (and a run resumed without pending rollouts) samples on-policy. The update's PPO ratio
    uses the sampler's behaviour log-probs (`behaviour_logprobs`).

    A checkpoint holds the pending batch's sampler outputs (`PENDING_ROLLOUTS`) and the data
    position before its prompts; a resumed run prepares them again (decoding, verification and
    pairs are deterministic), so it continues as the uninterrupted run does.
    """

    def __init__(self, run: Trainer, pipeline, tools: HostTools, stack: contextlib.ExitStack):
        self.run, self.pipeline, self.tools = run, pipeline, tools
        self.overlap = run.config.rollout.overlap
        self.ahead: _Ahead | None = None
        self.executor = None
        if self.overlap:
            self.executor = stack.enter_context(concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="coop-rollouts"))

    def next(self, step: int) -> tuple[dict, dict, concurrent.futures.Future | None]:
        """(batch, host metrics, pending rule labels) of `step`."""
        run, c = self.run, self.run.config
        if not self.overlap:
            if c.rl.dynamic_sampling:
                return *collect_informative(run, step, self.pipeline, self.tools), None
            return collect(run, step, self.pipeline.next_batch(), self.tools)
        if self.ahead is None:
            self._prepare_ahead(step)
        t0 = time.perf_counter()
        batch, metrics, pending = self.ahead.prepared.result()
        metrics["time/rollout_wait"] = time.perf_counter() - t0
        self.ahead = None
        if step + 1 < c.train.steps:
            self._prepare_ahead(step + 1)
        return batch, metrics, pending

    def _prepare_ahead(self, step: int, samples: Samples | None = None) -> None:
        data_state = self.pipeline.state()
        records = self.pipeline.next_batch()
        if samples is None:
            samples = sample_rollouts(self.run, records, _rollout_key(self.run, step))
        prepared = self.executor.submit(prepare_batch, self.run, step, records, samples,
                                        self.tools)
        self.ahead = _Ahead(step, data_state, samples, prepared)

    def checkpoint(self) -> tuple[dict, dict]:
        """(meta entries, host items) that let a resumed run continue from here."""
        if self.ahead is None:
            return {"data": self.pipeline.state(), PENDING_ROLLOUTS: False}, {}
        views = [{k: v for k, v in out._asdict().items() if v is not None}
                 for out in self.ahead.samples.outs]
        return ({"data": self.ahead.data_state, PENDING_ROLLOUTS: True},
                {PENDING_ROLLOUTS: {"views": views}})

    def resume(self, step: int, meta: dict) -> None:
        """After the pipeline's restore: prepare the checkpoint's pending batch of `step` again."""
        if self.overlap and meta.get(PENDING_ROLLOUTS) and step < self.run.config.train.steps:
            saved = self.run.ckpt.load_rows_item(PENDING_ROLLOUTS)
            self._prepare_ahead(step, Samples([sampling.Rollouts(**v) for v in saved["views"]]))


def finish_rule_labels(pending, scores: np.ndarray) -> dict:
    """Rule accuracy (and its agreement with this host's rows of the RM's scores) from labels
    verified while the device updated."""
    labels, _, timeouts = pending.result()
    return {"rule_accuracy": labels.mean(), "verifier_timeouts": timeouts,
            "rm_rule_agreement": float(np.mean((scores > 0) == (labels > 0.5)))}


def headline_name(config) -> str:
    """The headline metric in words, e.g. "avg@8 (T=0.7, top-p 0.95)" or "greedy"."""
    e = config.eval
    if e.headline == "greedy":
        return "greedy"
    return f"avg@{e.k} (T={e.temperature:g}, top-p {e.top_p:g})"


def evaluate(run: Trainer, verifier) -> dict:
    """Greedy accuracy, avg@k (eval.k samples per problem) and the headline one of the two, of
    the current policy on the held-out records."""
    c = run.config
    if not run.eval_records:
        return {}
    report, _ = evaluate_policy(
        run.state.policy.params, run.policy_cfg, run.tokenizer, run.eval_records,
        template=c.data.prompt_template, chat=c.data.chat_template, verifier=verifier,
        k=c.eval.k, temperature=c.eval.temperature, top_p=c.eval.top_p, greedy=True,
        max_prompt_len=c.data.max_prompt_len, max_new_tokens=c.rollout.max_new_tokens,
        batch_size=c.eval.batch_size, seed=c.seed, kernel_impl=c.kernels.impl)
    metrics = {"eval/greedy_accuracy": report["greedy_accuracy"]["mean"],
               "eval/sampled_accuracy": report["avg_at_k"]["mean"]}
    metrics["eval/headline_accuracy"] = metrics[
        "eval/greedy_accuracy" if c.eval.headline == "greedy" else "eval/sampled_accuracy"]
    return metrics


def rm_heldout(run: Trainer) -> dict:
    """The RM's accuracy on `cooper.heldout_triples` (when set)."""
    path = run.config.cooper.heldout_triples
    if run.rm_cfg is None or not path:
        return {}
    report, _ = evaluate_reward_model(run.state.rm.params, run.rm_cfg, run.rm_tokenizer,
                                      read_triples(path), fmt=rm_input_format(run.config),
                                      batch_size=64)
    return {"rm_heldout_accuracy": report["accuracy"]["mean"]}


def _due(done: int, every: int, last: bool) -> bool:
    return last or bool(every and done % every == 0)


# ---------------------------------------------------------------------- the loop
def make_verifiers(c, stack: contextlib.ExitStack) -> tuple[RuleVerifier, RuleVerifier]:
    """(the rewards' verifier, the evaluation's). Rewards match answers as
    `rewards.extraction_mode` says (the reference's mode for the reward type by default); held-out
    accuracy stays lenient so that runs of different reward types compare."""
    mode = rewards.extraction_mode(c)
    verifier = stack.enter_context(RuleVerifier(c.verifier.num_workers, c.verifier.timeout_s,
                                                extraction=mode))
    if mode == "lenient":
        return verifier, verifier
    return verifier, stack.enter_context(RuleVerifier(c.verifier.num_workers,
                                                      c.verifier.timeout_s))


def save_checkpoint(run: Trainer, feed: RolloutFeed, done: int, extra: dict) -> None:
    feed_meta, host_items = feed.checkpoint()
    run.ckpt.save(done, run.state, run.meta(done, extra | feed_meta), host_items=host_items)


def run_loop(run: Trainer) -> dict:
    c = run.config
    pipeline = data.PromptPipeline(run.train_records, batch_size=run.B, seed=c.seed)
    stop = {"flag": False}
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.update(flag=True))
    start_time = time.time()
    with contextlib.ExitStack() as stack:
        verifier, eval_verifier = make_verifiers(c, stack)
        background = stack.enter_context(concurrent.futures.ThreadPoolExecutor(max_workers=1))
        tools = HostTools(verifier, background)
        if run.source.trains_rm and cooper.negative_strategy(c.cooper.negative).needs_assistant:
            tools.rewriter = cooper.make_rewriter(c, run.mesh)
        feed = RolloutFeed(run, pipeline, tools, stack)
        if run.resuming:
            run.state, meta = run.ckpt.restore(run.state)
            pipeline.restore(meta["data"])
            feed.resume(int(run.state.step), meta)
            extra = {k: meta.get(k) for k in ("initial_accuracy", "initial_sampled_accuracy",
                                              "initial_headline_accuracy")}
            extra["wall_seconds_before"] = meta.get("wall_seconds_before", 0.0)
            log.info("resumed from step %d", int(run.state.step))
        else:
            initial = evaluate(run, eval_verifier)
            extra = {"initial_accuracy": initial.get("eval/greedy_accuracy"),
                     "initial_sampled_accuracy": initial.get("eval/sampled_accuracy"),
                     "initial_headline_accuracy": initial.get("eval/headline_accuracy"),
                     "wall_seconds_before": 0.0}
            save_checkpoint(run, feed, 0, extra)
        start = int(run.state.step)
        writer = MetricWriter(run.workdir, start if run.resuming else None,
                              primary=jax.process_index() == 0)
        if not run.resuming:  # step 0 of the curves: the policy (and RM) before RL
            writer.write(0, initial | rm_heldout(run))
        nan_skips, final = 0, None
        bar = tqdm.tqdm(range(start, c.train.steps), initial=start, total=c.train.steps,
                        desc="coop-train", disable=jax.process_index() != 0)
        for step in bar:
            t_step = time.perf_counter()
            metrics = {}
            if run.source.before_step is not None:
                run.state, metrics = run.source.before_step(run.state, step, c)
            batch, host_metrics, pending = feed.next(step)

            t0 = time.perf_counter()
            new_state, step_metrics = run.update(batch)  # dispatched asynchronously
            rm_scores = step_metrics.pop("rm_scores", None)
            step_metrics = jax.device_get(step_metrics)
            if pending is not None:
                host_metrics.update(finish_rule_labels(
                    pending, parallel.host.local_rows(parallel.host.host_aligned(rm_scores))))
            metrics.update(parallel.host.reduce_metrics(host_metrics))
            metrics["time/update"] = time.perf_counter() - t0
            if np.isfinite(step_metrics["loss"]):
                run.state = new_state
            elif c.train.nan_policy == "error" or nan_skips >= c.train.max_nan_skips:
                raise FloatingPointError(f"non-finite loss ({step_metrics['loss']}) at step "
                                         f"{step}")
            else:
                nan_skips += 1
                log.warning("non-finite loss at step %d: update skipped", step)
                metrics["skipped_update"] = 1
            metrics.update(step_metrics)
            metrics["time/step"] = time.perf_counter() - t_step
            metrics["tokens_per_second"] = metrics["generated_tokens"] / metrics["time/step"]

            done = step + 1
            last = done == c.train.steps
            if _due(done, c.train.eval_every, last):
                metrics.update(evaluate(run, eval_verifier))
            if _due(done, c.cooper.heldout_every, last):
                metrics.update(rm_heldout(run))
            if last:
                final = metrics
            row = writer.write(done, metrics)
            bar.set_postfix(reward=f"{row.get('reward_mean', 0):.3f}",
                            acc=f"{row.get('rule_accuracy', 0):.3f}")
            stop["flag"] = parallel.host.any_process(stop["flag"])  # every host saves, or none
            if stop["flag"] or _due(done, c.train.checkpoint_every, last):
                wall = extra["wall_seconds_before"] + time.time() - start_time
                save_checkpoint(run, feed, done, extra | {"wall_seconds_before": wall})
            if stop["flag"]:
                log.warning("SIGTERM: checkpoint saved at step %d, exiting", done)
                writer.close()
                signal.signal(signal.SIGTERM, previous)
                return {"stopped_at": done}
        writer.close()
        if final is None:  # resumed a run that had already finished its steps
            final = evaluate(run, eval_verifier) | rm_heldout(run)
        # every host's verifier pool checked its own rows
        every_host = parallel.host.gather_json(verifier.stats.as_dict())
        stats = {k: sum(host[k] for host in every_host) for k in every_host[0]}
    signal.signal(signal.SIGTERM, previous)
    summary = {
        "method": c.reward.type, "reward_type": c.reward.type, "seed": c.seed,
        "steps": c.train.steps,
        "initial_accuracy": extra.get("initial_accuracy"),
        "initial_sampled_accuracy": extra.get("initial_sampled_accuracy"),
        "final_accuracy": final.get("eval/greedy_accuracy"),
        "final_sampled_accuracy": final.get("eval/sampled_accuracy"),
        # the headline metric (eval.headline) and its values; the two above are greedy / avg@k
        "headline": headline_name(c),
        "initial_headline_accuracy": extra.get("initial_headline_accuracy"),
        "final_headline_accuracy": final.get("eval/headline_accuracy"),
        "wall_seconds": extra["wall_seconds_before"] + time.time() - start_time,
        "skipped_rows": run.skipped_rows, "verifier": stats,
    }
    if "rm_heldout_accuracy" in final:
        summary["rm_heldout_accuracy"] = final["rm_heldout_accuracy"]
    if jax.process_index() == 0:
        with open(os.path.join(run.workdir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
        plot_curves({os.path.basename(os.path.abspath(run.workdir)): read_metrics(run.workdir)},
                    os.path.join(run.workdir, "curves.png"))
    run.ckpt.close()
    return summary


def train(config, workdir: str) -> dict:
    return Trainer(config, workdir).run()


def run() -> None:
    """Console entry point (`coop-train`)."""
    from absl import app, flags
    from ml_collections import config_flags

    config_flags.DEFINE_config_file("config", None, "Path to a get_config() file.",
                                    lock_config=True)
    flags.DEFINE_string("workdir", None, "Run directory (checkpoints, metrics, summary).")
    flags.mark_flags_as_required(["config", "workdir"])

    def main(argv):
        if len(argv) > 1:
            raise app.UsageError(f"unexpected arguments: {argv[1:]}")
        from absl import logging as absl_logging
        absl_logging.set_verbosity(absl_logging.WARNING)  # orbax logs every save at INFO
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
        summary = train(flags.FLAGS.config, flags.FLAGS.workdir)
        if jax.process_index() == 0:
            print(json.dumps(summary, indent=2))

    app.run(main)


if __name__ == "__main__":
    run()
