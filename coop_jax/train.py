"""coop-train: GRPO-family RL with rule, RM (static / Cooper / hybrid) and label-free rewards.

    coop-train --config=configs/default.py --workdir=DIR [--config.rollout.group_size=16 ...]

One step (ALGORITHMS.md): prompts -> G rollouts each (KV-cache sampler) -> decode -> rule verifier
(process pool) and the configured reward source -> one compiled update of the policy (and, for
Cooper, of the reward model on rule-labelled pairs) -> metrics. Resumes from the newest checkpoint
in DIR; SIGTERM saves and exits.
"""
from __future__ import annotations

import concurrent.futures
import json
import logging
import math
import os
import signal
import time

import jax
import jax.numpy as jnp
import numpy as np
import tqdm

from coop_jax import checkpoint, cooper, data, hf, parallel, rewards, rl, sampling
from coop_jax import config as config_lib
from coop_jax.models.tokenizer import load_tokenizer, stop_token_ids
from coop_jax.rm_input import format_rm_input, tokenize_rm_inputs
from coop_jax.train_step import (StepConfig, init_state, jit_step, make_optimizer, place_state,
                                 state_shardings)
from coop_jax.verify import RuleVerifier

log = logging.getLogger("coop_jax")


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
    """(ModelConfig, params) from `hf_path` (HF folder, .gguf or Hub id; an RM may start from a
    causal LM, which gets a new head) or from the architecture fields."""
    if section.hf_path:
        lm = hf.load(section.hf_path, dtype=section.param_dtype, compute_dtype=section.dtype,
                     mesh=mesh, num_labels=num_labels, keep_layers=section.keep_layers or None)
        if lm.config.num_labels != num_labels:
            raise ValueError(f"{section.hf_path} has num_labels={lm.config.num_labels}, expected "
                             f"{num_labels}")
        return lm.config, lm.params
    if len(tokenizer) > section.vocab_size:
        raise ValueError(f"config.model.vocab_size ({section.vocab_size}) is smaller than the "
                         f"tokenizer ({len(tokenizer)} tokens)")
    cfg = config_lib.model_config(section, num_labels=num_labels)
    return cfg, parallel.sharded_init(cfg, rng, mesh)


def _tokenizer_path(config) -> str:
    return config.model.tokenizer or config.model.hf_path or ""


def _prompts(config, tokenizer, records, question_key="question") -> list[str]:
    return [data.format_prompt(config.data.prompt_template, r[question_key] or r["question"],
                               tokenizer=tokenizer, chat=config.data.chat_template)
            for r in records]


class Trainer:
    """Holds what one run needs; `run()` is the training loop."""

    def __init__(self, config, workdir: str):
        self.config, self.workdir = config, workdir
        os.makedirs(workdir, exist_ok=True)
        parallel.maybe_initialize_distributed(config.mesh.distributed)
        config_lib.validate(config, jax.device_count())
        self.mesh = parallel.make_mesh(
            config_lib.resolve_mesh_shape(config.mesh.shape, jax.device_count()))
        self.reward_type = config.reward.type
        self.G, self.B = config.rollout.group_size, config.rollout.prompts_per_step
        self.tokenizer = load_tokenizer(_tokenizer_path(config) or None)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.train_records, self.eval_records, self.skipped_rows = load_records(config)
        if self.reward_type == "corewarding_1":  # the second view must exist on every record
            data.sources.check_rephrased(self.train_records, config.data.dataset,
                                         config.data.rephrase_field, config.data.data_dir)
        self.rewriter = None  # the assistant model of cooper.negative == "rewrite", set in run()
        self._background = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        key = jax.random.key(config.seed)
        self.policy_cfg, policy_params = build_model(config.model, self.tokenizer, self.mesh,
                                                     jax.random.fold_in(key, 1))
        self.valid_vocab = min(len(self.tokenizer), self.policy_cfg.vocab_size)
        self.ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"),
                                            keep=config.train.keep_checkpoints)
        self.resuming = self.ckpt.latest_step() is not None
        if config.sft.steps and not self.resuming:
            policy_params = self._sft(policy_params)
        self._build_rm(key)
        self._build_state(policy_params)
        self._build_sampler()

    # ------------------------------------------------------------------ construction
    def _sft(self, params):
        from coop_jax import sft
        params, losses = sft.warm_start_from_config(params, self.policy_cfg, self.tokenizer,
                                                    self.train_records, self.config)
        log.info("SFT warm start: %d steps, loss %.3f -> %.3f", len(losses), losses[0],
                 losses[-1])
        return jax.device_put(params, parallel.param_shardings(self.policy_cfg, self.mesh))

    def _build_rm(self, key):
        c = self.config
        self.rm_cfg = self.rm_params = None
        if self.reward_type not in config_lib.RM_REWARD_TYPES:
            return
        rm_path = c.cooper.rm_checkpoint
        if rm_path:
            self.rm_cfg, params, meta = checkpoint.load_model(rm_path, "rm")
            self.rm_params = parallel.shard_params(params, self.rm_cfg, self.mesh)
            rm_tokenizer = meta.get("rm_tokenizer", meta.get("tokenizer")) or None
            self.rm_tokenizer = load_tokenizer(rm_tokenizer)
            trained_len = meta.get("config", {}).get("cooper", {}).get("max_len")
            if trained_len and trained_len != c.cooper.max_len:
                log.warning("the RM in %s was trained with cooper.max_len=%s, this run uses %s",
                            rm_path, trained_len, c.cooper.max_len)
        else:
            if not c.reward_model.hf_path:
                log.warning("reward model starts from random weights (no "
                                "reward_model.hf_path or cooper.rm_checkpoint)")
            self.rm_cfg, self.rm_params = build_model(c.reward_model, self.tokenizer, self.mesh,
                                                      jax.random.fold_in(key, 2), num_labels=1)
            self.rm_tokenizer = (load_tokenizer(c.reward_model.hf_path)
                                 if c.reward_model.hf_path else self.tokenizer)

    def _build_state(self, policy_params):
        c = self.config
        steps = c.train.steps
        self.tx = make_optimizer(c.optim.learning_rate, warmup_steps=c.optim.warmup_steps,
                                 total_steps=steps, schedule=c.optim.schedule,
                                 weight_decay=c.optim.weight_decay, b1=c.optim.b1,
                                 b2=c.optim.b2, eps=c.optim.eps, grad_clip=c.optim.grad_clip)
        self.train_rm = self.reward_type == "cooper"
        self.rm_tx = None
        if self.rm_cfg is not None:
            self.rm_tx = make_optimizer(
                c.cooper.learning_rate, warmup_steps=math.ceil(c.cooper.warmup_ratio * steps),
                total_steps=steps, weight_decay=c.cooper.weight_decay,
                grad_clip=c.cooper.grad_clip)
        # Co-rewarding-II: the EMA teacher is also the KL reference.
        needs_ref = c.rl.kl_coef > 0 or self.reward_type == "corewarding_2"
        ref = jax.tree_util.tree_map(jnp.copy, policy_params) if needs_ref else None
        state = init_state(policy_params, self.tx, ref_params=ref, rm_params=self.rm_params,
                           rm_tx=self.rm_tx)
        state = place_state(state, self.mesh)
        self.state_shardings = state_shardings(state)
        loss_cfg = rl.LossConfig(
            clip_eps_low=c.rl.clip_eps_low, clip_eps_high=c.rl.clip_eps_high,
            clip_ratio_c=c.rl.clip_ratio_c or None, ratio_level=c.rl.ratio_level,
            aggregation=c.rl.aggregation, kl_coef=0.0 if c.rl.kl_in_reward else c.rl.kl_coef,
            kl_estimator=c.rl.kl_estimator, entropy_coef=c.rl.entropy_coef)
        self.step_cfg = StepConfig(
            policy=self.policy_cfg, loss=loss_cfg, group_size=self.G, advantage=c.rl.advantage,
            temperature=c.rollout.temperature, ppo_epochs=c.rl.ppo_epochs,
            num_minibatches=c.rl.num_minibatches, kl_in_reward=c.rl.kl_in_reward,
            reward_source=rewards.REWARD_SOURCE[self.reward_type], rm=self.rm_cfg,
            rm_threshold=c.reward.threshold, hybrid_rm_weight=c.reward.hybrid_rm_weight,
            train_rm=self.train_rm, kernel_impl=c.kernels.impl, valid_vocab=self.valid_vocab,
            num_views=2 if self.reward_type == "corewarding_1" else 1,
            kl_coef_in_reward=c.rl.kl_coef)
        self.step_fn = None  # compiled on the first batch (its per-array shardings)
        self.state = state

    def update(self, batch: dict):
        """The compiled step; built on first use with explicit state and batch shardings."""
        if self.step_fn is None:
            self.step_fn = jit_step(self.step_cfg, self.tx, self.rm_tx,
                                    state_shardings=self.state_shardings,
                                    batch_sharding=parallel.batch_shardings(batch, self.mesh),
                                    replicated=parallel.replicated(self.mesh),
                                    donate=self.config.train.nan_policy == "error")
        return self.step_fn(self.state, batch)

    def _build_sampler(self):
        c = self.config
        common = dict(eos_ids=stop_token_ids(self.tokenizer), pad_id=self.tokenizer.pad_token_id,
                      valid_vocab=self.valid_vocab, kernel_impl=c.kernels.impl,
                      max_new_tokens=c.rollout.max_new_tokens)
        self.rollout_cfg = sampling.SamplingConfig(
            temperature=c.rollout.temperature, top_k=c.rollout.top_k, top_p=c.rollout.top_p,
            num_samples=self.G, **common)
        self.sample = sampling.make(self.policy_cfg, self.rollout_cfg)
        self.ema = jax.jit(lambda teacher, policy, a: jax.tree_util.tree_map(
            lambda t, p: (a * p + (1 - a) * t).astype(t.dtype), teacher, policy))

    # ------------------------------------------------------------------ one step's host work
    def _rollouts(self, params, records, key, question_key="question"):
        ids, mask = data.tokenize_prompts(self.tokenizer, _prompts(self.config, self.tokenizer,
                                                                   records, question_key),
                                          self.config.data.max_prompt_len)
        out = self.sample(params, ids, mask, key)
        return out, sampling.decode_texts(self.tokenizer, out)

    def _rm_inputs(self, records, texts) -> tuple[np.ndarray, np.ndarray]:
        rows = [format_rm_input(records[i // self.G]["question"], records[i // self.G]["reference"],
                                t) for i, t in enumerate(texts)]
        return tokenize_rm_inputs(self.rm_tokenizer, rows, self.config.cooper.max_len)

    def _batch(self, out, host_rewards: np.ndarray) -> dict:
        c = self.config
        lengths, truncated = np.asarray(out.lengths), np.asarray(out.truncated)
        shaped, loss_weight = rl.apply_overlong(
            c.rl.overlong, jnp.asarray(host_rewards), jnp.asarray(lengths), jnp.asarray(truncated),
            max_len=c.rollout.max_new_tokens, cache_len=c.rl.overlong_cache_len,
            factor=c.rl.overlong_factor)
        return {"prompt_tokens": np.asarray(out.prompt_tokens),
                "prompt_mask": np.asarray(out.prompt_mask), "tokens": np.asarray(out.tokens),
                "mask": np.asarray(out.mask), "rewards": host_rewards.astype(np.float32),
                "reward_bonus": np.asarray(shaped, np.float32) - host_rewards.astype(np.float32),
                "loss_weight": np.asarray(loss_weight, np.float32)}

    def collect(self, step: int, records: list[dict], verifier, draw: int = 0):
        """Rollouts, rewards and (for Cooper) pairs of one step: the host half of the algorithm.

        Returns (batch, metrics, pending): `pending` is a future of rule labels still being
        computed (only where no reward depends on them), else None.
        """
        c = self.config
        key = jax.random.fold_in(jax.random.fold_in(jax.random.key(c.seed), step), draw)
        timings, metrics = {}, {}
        policy = self.state.policy.params
        t0 = time.perf_counter()
        if self.reward_type == "corewarding_2":
            a = cooper.corewarding_decay(step, c.corewarding.a_start, c.corewarding.a_end,
                                         c.corewarding.decay_steps or c.train.steps)
            self.state = self.state.replace(ref_params=self.ema(self.state.ref_params, policy, a))
            metrics["teacher_decay"] = a
        out, texts = self._rollouts(policy, records, jax.random.fold_in(key, 0))
        row_records = [records[i // self.G] for i in range(len(texts))]
        if self.reward_type == "corewarding_1":
            out2, texts2 = self._rollouts(policy, records, jax.random.fold_in(key, 1),
                                          c.data.rephrase_field)
        timings["time/sample"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        references = [r["reference"] for r in row_records]
        pending = None
        if self.reward_type == "static_rm":
            # The rule labels only feed diagnostics here: verify while the device updates.
            pending = self._background.submit(rewards.rule_labels, verifier, references, texts)
            labels = host_rewards = np.zeros(len(texts), np.float32)
        else:
            labels, extracted, timeouts = rewards.rule_labels(verifier, references, texts)
            metrics.update(rule_accuracy=labels.mean(), verifier_timeouts=timeouts)
            host_rewards = labels
        if self.reward_type == "majority_vote":
            pseudo = rewards.group_majority_labels(extracted, self.G)
            host_rewards = rewards.match_rewards(extracted, np.repeat(pseudo, self.G).tolist())
        elif self.reward_type == "corewarding_2":
            _, teacher_texts = self._rollouts(self.state.ref_params, records,
                                              jax.random.fold_in(key, 2))
            pseudo = rewards.group_majority_labels(verifier.extract_batch(teacher_texts), self.G)
            host_rewards = rewards.match_rewards(extracted, np.repeat(pseudo, self.G).tolist())
        elif self.reward_type == "corewarding_1":
            extracted2 = verifier.extract_batch(texts2)
            pseudo = rewards.group_majority_labels(extracted2, self.G)    # label for x from x'
            pseudo2 = rewards.group_majority_labels(extracted, self.G)    # label for x' from x
            host_rewards = rewards.match_rewards(extracted, np.repeat(pseudo, self.G).tolist())
            rewards2 = rewards.match_rewards(extracted2, np.repeat(pseudo2, self.G).tolist())
        if self.reward_type in ("majority_vote", "corewarding_1", "corewarding_2"):
            truth = [rewards.normalize_answer(r["reference"]) for r in records]
            metrics["pseudo_label_accuracy"] = float(np.mean(
                [p is not None and self._same(p, t) for p, t in zip(pseudo, truth)]))
        timings["time/verify"] = time.perf_counter() - t0

        batch = self._batch(out, host_rewards)
        if self.reward_type == "corewarding_1":
            batch = {k: np.concatenate([v, self._batch(out2, rewards2)[k]]) for k, v in batch.items()}
        if self.rm_cfg is not None:
            batch["rm_tokens"], batch["rm_mask"] = self._rm_inputs(records, texts)
            if pending is None:
                batch["rule_labels"] = labels
        if self.train_rm:
            t0 = time.perf_counter()
            pairs, pair_stats = cooper.build_pairs(
                c.cooper.negative, records, texts, labels, extracted, self.G, verifier=verifier,
                rewriter=self.rewriter, rng=np.random.default_rng([c.seed, step]),
                tries=c.cooper.rewrite_tries)
            batch.update(cooper.tokenize_pairs(self.rm_tokenizer, records, pairs,
                                               c.cooper.max_len))
            metrics.update(pair_stats)
            timings["time/pairs"] = time.perf_counter() - t0
        gen_tokens = int(np.asarray(out.mask).sum())
        metrics.update(response_length=float(np.asarray(out.lengths).mean()),
                       truncated_fraction=float(np.asarray(out.truncated).mean()),
                       generated_tokens=gen_tokens, **timings)
        return batch, metrics, pending

    def collect_informative(self, step: int, pipeline, verifier) -> tuple[dict, dict]:
        """DAPO dynamic sampling: drop groups whose rewards are all equal, refill from further
        prompts (at most rl.dynamic_max_draws draws)."""
        draw_metrics = []

        def draw():
            batch, metrics, _ = self.collect(step, pipeline.next_batch(), verifier,
                                             draw=len(draw_metrics))
            draw_metrics.append(metrics)
            return {k: v.reshape((self.B, self.G) + v.shape[1:]) for k, v in batch.items()}

        groups, stats = rl.fill_batch(draw, self.B, self.config.rl.dynamic_max_draws)
        batch = {k: v.reshape((self.B * self.G,) + v.shape[2:]) for k, v in groups.items()}
        return batch, draw_metrics[0] | {f"dynamic/{k}": v for k, v in stats.items()}

    @staticmethod
    def _same(a, b):
        from coop_jax.verify import answers_equivalent
        return answers_equivalent(b, a)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, params, verifier) -> dict:
        from coop_jax.eval.evaluate import evaluate_policy
        c = self.config
        if not self.eval_records:
            return {}
        report, _ = evaluate_policy(
            params, self.policy_cfg, self.tokenizer, self.eval_records,
            template=c.data.prompt_template, chat=c.data.chat_template, verifier=verifier, k=1,
            temperature=c.eval.temperature, top_p=c.eval.top_p, greedy=True,
            max_prompt_len=c.data.max_prompt_len, max_new_tokens=c.rollout.max_new_tokens,
            batch_size=c.eval.batch_size, seed=c.seed, kernel_impl=c.kernels.impl)
        return {"eval/greedy_accuracy": report["greedy_accuracy"]["mean"],
                "eval/sampled_accuracy": report["avg_at_k"]["mean"]}

    def _rm_heldout(self) -> dict:
        path = self.config.cooper.heldout_triples
        if self.rm_cfg is None or not path:
            return {}
        from coop_jax.eval.evaluate import evaluate_reward_model
        with open(path) as f:
            triples = [json.loads(line) for line in f if line.strip()]
        report, _ = evaluate_reward_model(self.state.rm.params, self.rm_cfg, self.rm_tokenizer,
                                          triples, max_len=self.config.cooper.max_len,
                                          batch_size=64)
        return {"rm_heldout_accuracy": report["accuracy"]["mean"]}

    # ------------------------------------------------------------------ the loop
    def meta(self, step: int, pipeline, extra: dict) -> dict:
        meta = {"step": step, "data": pipeline.state(), "config": self.config.to_dict(),
                "tokenizer": _tokenizer_path(self.config),
                "policy_model_config": checkpoint.model_config_to_dict(self.policy_cfg)}
        if self.rm_cfg is not None:
            meta["rm_model_config"] = checkpoint.model_config_to_dict(self.rm_cfg)
        return meta | extra

    def run(self) -> dict:
        c = self.config
        pipeline = data.PromptPipeline(self.train_records, batch_size=self.B, seed=c.seed)
        stop = {"flag": False}
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.update(flag=True))
        start_time = time.time()
        with RuleVerifier(c.verifier.num_workers, c.verifier.timeout_s) as verifier:
            if self.train_rm and c.cooper.negative == "rewrite":
                self.rewriter = cooper.make_rewriter(c, self.mesh)
            if self.resuming:
                self.state, meta = self.ckpt.restore(self.state)
                pipeline.restore(meta["data"])
                extra = {k: meta.get(k) for k in ("initial_accuracy", "initial_sampled_accuracy")}
                extra["wall_seconds_before"] = meta.get("wall_seconds_before", 0.0)
                log.info("resumed from step %d", int(self.state.step))
            else:
                initial = self.evaluate(self.state.policy.params, verifier)
                extra = {"initial_accuracy": initial.get("eval/greedy_accuracy"),
                         "initial_sampled_accuracy": initial.get("eval/sampled_accuracy"),
                         "wall_seconds_before": 0.0}
                self.ckpt.save(0, self.state, self.meta(0, pipeline, extra))
            start = int(self.state.step)
            writer = _metric_writer(self.workdir, start if self.resuming else None)
            if not self.resuming:  # step 0 of the curves: the policy (and RM) before RL
                writer.write(0, initial | self._rm_heldout())
            nan_skips, final = 0, None
            bar = tqdm.tqdm(range(start, c.train.steps), initial=start, total=c.train.steps,
                            desc="coop-train", disable=jax.process_index() != 0)
            for step in bar:
                t_step = time.perf_counter()
                pending = None
                if c.rl.dynamic_sampling:
                    batch, metrics = self.collect_informative(step, pipeline, verifier)
                else:
                    batch, metrics, pending = self.collect(step, pipeline.next_batch(), verifier)
                t0 = time.perf_counter()
                new_state, step_metrics = self.update(batch)  # dispatched asynchronously
                if pending is not None:
                    labels, _, timeouts = pending.result()
                    metrics.update(rule_accuracy=labels.mean(), verifier_timeouts=timeouts)
                step_metrics = jax.device_get(step_metrics)
                if pending is not None:
                    scores = np.asarray(step_metrics.pop("rm_scores"))
                    metrics["rm_rule_agreement"] = float(np.mean((scores > 0) == (labels > 0.5)))
                metrics["time/update"] = time.perf_counter() - t0
                if not np.isfinite(step_metrics["loss"]):
                    if c.train.nan_policy == "error" or nan_skips >= c.train.max_nan_skips:
                        raise FloatingPointError(f"non-finite loss ({step_metrics['loss']}) at "
                                                 f"step {step}")
                    nan_skips += 1
                    log.warning("non-finite loss at step %d: update skipped", step)
                    metrics["skipped_update"] = 1
                else:
                    self.state = new_state
                metrics.update(step_metrics)
                metrics["time/step"] = time.perf_counter() - t_step
                metrics["tokens_per_second"] = metrics["generated_tokens"] / metrics["time/step"]
                done = step + 1
                last = done == c.train.steps
                if last or (c.train.eval_every and done % c.train.eval_every == 0):
                    metrics.update(self.evaluate(self.state.policy.params, verifier))
                if last or (c.cooper.heldout_every and done % c.cooper.heldout_every == 0):
                    metrics.update(self._rm_heldout())
                if last:
                    final = metrics
                row = writer.write(done, metrics)
                bar.set_postfix(reward=f"{row.get('reward_mean', 0):.3f}",
                                acc=f"{row.get('rule_accuracy', 0):.3f}")
                if stop["flag"] or (c.train.checkpoint_every and done % c.train.checkpoint_every
                                    == 0) or done == c.train.steps:
                    wall = extra["wall_seconds_before"] + time.time() - start_time
                    self.ckpt.save(done, self.state, self.meta(
                        done, pipeline, extra | {"wall_seconds_before": wall}))
                if stop["flag"]:
                    log.warning("SIGTERM: checkpoint saved at step %d, exiting", done)
                    writer.close()
                    signal.signal(signal.SIGTERM, previous)
                    return {"stopped_at": done}
            writer.close()
            if final is None:  # resumed a run that had already finished its steps
                final = self.evaluate(self.state.policy.params, verifier) | self._rm_heldout()
            stats = verifier.stats.as_dict()
        signal.signal(signal.SIGTERM, previous)
        summary = {
            "method": self.reward_type, "reward_type": self.reward_type, "seed": c.seed,
            "steps": c.train.steps,
            "initial_accuracy": extra.get("initial_accuracy"),
            "initial_sampled_accuracy": extra.get("initial_sampled_accuracy"),
            "final_accuracy": final.get("eval/greedy_accuracy"),
            "final_sampled_accuracy": final.get("eval/sampled_accuracy"),
            "wall_seconds": extra["wall_seconds_before"] + time.time() - start_time,
            "skipped_rows": self.skipped_rows, "verifier": stats,
        }
        if "rm_heldout_accuracy" in final:
            summary["rm_heldout_accuracy"] = final["rm_heldout_accuracy"]
        with open(os.path.join(self.workdir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
        _plot(self.workdir)
        self.ckpt.close()
        return summary


def _metric_writer(workdir, resume_step):
    from coop_jax.metrics_writer import MetricWriter
    return MetricWriter(workdir, resume_step)


def _plot(workdir: str) -> None:
    from coop_jax.eval.report import plot_curves
    from coop_jax.metrics_writer import read_metrics
    plot_curves({os.path.basename(os.path.abspath(workdir)): read_metrics(workdir)},
                os.path.join(workdir, "curves.png"))


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
        print(json.dumps(summary, indent=2))

    app.run(main)


if __name__ == "__main__":
    run()
