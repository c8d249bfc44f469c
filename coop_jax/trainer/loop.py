"""The training loop of coop-train: `Trainer` builds a run from the config (`trainer.setup`) and
`Trainer.run` is its loop; `train(config, workdir)` runs one.

One step (docs/ALGORITHMS.md, docs/ARCHITECTURE.md), as `Trainer.run` reads:
  before_step   the reward source's per-step hook (Co-rewarding-II: EMA teacher update)
  rollouts      sample -> decode -> verify -> reward -> pairs -> TrainBatch (`trainer.rollouts`)
  update        one compiled step (`train_step`): rewards on device, advantages, policy (and RM)
  evaluate      the evaluators `config.evals` lists, each at its cadence (`trainer.evaluators`:
                the policy's held-out accuracy, the RM's on its held-out triples, hack probes)
  log / checkpoint
                (with `monitor.enabled`: each logged row, step 0's included, goes to the
                reward-hacking monitor first; an alarm is a log line and an event in the row, and
                with monitor.action=stop a checkpoint and the end of the run: docs/monitor.md)
With `rollout.overlap` (one-step off-policy, `rollouts.RolloutFeed`), the rollouts of step t+1 are
sampled by the parameters update t starts from, and their host half runs in a thread while the
device updates. Resumes from the newest checkpoint of the workdir; SIGTERM saves and exits.
"""
from __future__ import annotations

import contextlib
import concurrent.futures
import dataclasses
import json
import logging
import os
import signal
import time

import jax
import jax.numpy as jnp
import numpy as np
import tqdm

from coop_jax import checkpoint, console, data, parallel, sampling
from coop_jax.rm import cooper
from coop_jax.trainer import rewards, sft
from coop_jax.trainer import evaluators, probes
from coop_jax import config as config_lib
from coop_jax.data.answer_forms import answer_marker, format_probes
from coop_jax.hf.build import with_lora
from coop_jax.eval.evaluate import strict_verifiers
from coop_jax.eval.report import plot_curves
from coop_jax.metrics_writer import MetricWriter, metrics_row, read_metrics
from coop_jax.models import lora
from coop_jax.monitor import RunTraits
from coop_jax.monitor.live import QUIET, RunMonitor, Verdict
from coop_jax.hf.tokenizer import load_tokenizer, prepare_tokenizer, stop_token_ids
from coop_jax.rm.load import RMSource, load_reward_model
from coop_jax.rm.optim import RMOptimizerSettings, rm_optimizer
from coop_jax.trainer.rollouts import (HostTools, PreparedBatch, RolloutFeed, RolloutSettings,
                                       RolloutSetup, all_wrong_group_metrics, finish_rule_labels,
                                       rm_label_metrics)
from coop_jax.trainer.batch import StepOutputs, TrainBatch, share_rm_prefix, trim_padding
from coop_jax.trainer.setup import (build_model, extraction_roles, load_records,
                                    make_verifiers, policy_optimizer, rule_header,
                                    headline_name, step_config, tokenizer_path, validate_config)
from coop_jax.trainer.step import StepConfig, TrainState, init_state, jit_step, place_state, \
    state_shardings
from coop_jax.verify import RuleVerifier

log = logging.getLogger("coop_jax")


# ---------------------------------------------------------------------- the compiled step
class CompiledStep:
    """`train_step` jitted with explicit shardings, built on the first batch (its arrays'
    shardings), taking this host's rows of a `TrainBatch`. With `pad_buckets`, each batch's
    padding is first cut to one of that many lengths per axis (`train_batch.trim_padding`); jit
    compiles once per distinct shape; the step's metrics gain the lengths and the count
    (`shape_metrics`)."""

    def __init__(self, cfg: StepConfig, tx, rm_tx, mesh, state_shardings, donate: bool,
                 pad_buckets: int = 0):
        self.cfg, self.tx, self.rm_tx, self.mesh = cfg, tx, rm_tx, mesh
        self.state_shardings, self.donate, self.pad_buckets = state_shardings, donate, pad_buckets
        self.fn, self.lengths, self.shapes = None, {}, set()

    def shape_metrics(self) -> dict:
        """The last batch's padded lengths (`shape/<axis>_len`) and how many shapes compiled."""
        return {f"shape/{k}_len": v for k, v in self.lengths.items()} | {
            "shape/compiled": len(self.shapes)}

    def shares_rm_prefix(self, host_batch: TrainBatch) -> bool:
        """The RM's inputs run each group's shared prefix once (`share_rm_prefix`) with
        rl.share_prompt_prefix, groups of more than one row, and trimmed padding (its two cut
        axes are as wide as the whole input until `trim_padding` cuts them)."""
        return (self.cfg.share_prompt_prefix and self.cfg.group_size > 1 and self.pad_buckets > 0
                and host_batch.rm is not None)

    def __call__(self, state: TrainState, host_batch: TrainBatch
                 ) -> tuple[TrainState, StepOutputs]:
        if self.cfg.share_prompt_prefix and not host_batch.groups_share_prompts(
                self.cfg.group_size):
            raise ValueError("rl.share_prompt_prefix: the rows of a group do not share one "
                             "prompt (rows must be prompt-major, G rollouts per prompt)")
        if self.pad_buckets:
            if self.shares_rm_prefix(host_batch):
                host_batch = share_rm_prefix(host_batch, self.cfg.group_size)
            host_batch, self.lengths = trim_padding(host_batch, self.pad_buckets)
        self.shapes.add(tuple(x.shape for x in jax.tree_util.tree_leaves(host_batch)))
        batch = host_batch.to_global(self.mesh, self.cfg.num_views)
        if self.fn is None:
            self.fn = jit_step(self.cfg, self.tx, self.rm_tx,
                               state_shardings=self.state_shardings,
                               batch_sharding=jax.tree_util.tree_map(lambda x: x.sharding, batch),
                               replicated=parallel.replicated(self.mesh), donate=self.donate)
        state, outputs = self.fn(state, batch)
        return state, outputs.replace(metrics=outputs.metrics | self.shape_metrics())


class _StopOnSigterm:
    """SIGTERM sets `requested` (every host then saves and exits at the same step)."""

    def __enter__(self):
        self.requested = False
        self.previous = signal.signal(signal.SIGTERM, self._request)
        return self

    def _request(self, *_):
        self.requested = True

    def __exit__(self, *exc):
        signal.signal(signal.SIGTERM, self.previous)


@dataclasses.dataclass
class RunStart:
    """Where the loop starts: its first step, the checkpointed run facts, the step-0 metrics."""
    step: int
    facts: dict            # initial accuracies and the wall time before this process
    initial: dict | None   # the policy (and RM) before RL; None when resumed


# ---------------------------------------------------------------------- the trainer
class Trainer:
    """A run: models, optimizer state, the compiled step and the checkpointer (set up from the
    config), and the loop `run()` over the step's stages. Only its own methods change its
    state."""

    def __init__(self, config: config_lib.Config, workdir: str):
        config = config_lib.typed(config)  # a Config as it is; a ConfigDict (tests) converted
        self.config, self.workdir = config, workdir
        os.makedirs(workdir, exist_ok=True)
        parallel.maybe_initialize_distributed(config.mesh)
        validate_config(config, jax.device_count(), jax.process_count())
        self.mesh = parallel.make_mesh(
            config_lib.resolve_mesh_shape(config.mesh.shape, jax.device_count()))
        source = rewards.reward_source(config.reward.type)
        tokenizer = prepare_tokenizer(load_tokenizer(tokenizer_path(config) or None))
        self.records = load_records(config)
        if source.num_views > 1:  # the second view must exist on every record
            data.sources.check_rephrased(self.records.train, config.data.dataset,
                                         config.data.rephrase_field, config.data.data_dir)
        self.ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"),
                                            keep=config.train.keep_checkpoints)
        self.resuming = self.ckpt.latest_step() is not None
        key = jax.random.key(config.seed)
        self.policy_cfg, policy_params = self._policy(tokenizer, key)
        rm_source = RMSource.from_config(config)  # the RM and the run's RM input format
        self.rm = (load_reward_model(rm_source, tokenizer, self.mesh, jax.random.fold_in(key, 2),
                                     jax.random.fold_in(key, 4)) if source.needs_rm else None)
        self.state = self._initial_state(policy_params, source)
        valid_vocab = min(len(tokenizer), self.policy_cfg.vocab_size)
        self.step = CompiledStep(
            step_config(config, self.policy_cfg, self.rm and self.rm.config, valid_vocab),
            self.tx, self.rm_tx, self.mesh, state_shardings(self.state),
            donate=config.train.nan_policy == "error", pad_buckets=config.rl.pad_buckets)
        self.setup = RolloutSetup(
            RolloutSettings.from_config(config, source), self.mesh, source, tokenizer,
            self._sampler(tokenizer, valid_vocab), rm_tokenizer=self.rm and self.rm.tokenizer,
            rm_format=rm_source.fmt if self.rm else None,
            reward_options=rewards.REWARD_SOURCES.options(config.reward.type, config),
            answer_marker=answer_marker(self.records.train))
        self.eval_settings = evaluators.EvalSettings.from_config(config)
        self.probe_settings = probes.ProbeSettings.from_config(config)
        self.monitor_settings = config.monitor
        for line in rule_header(config, source.trains_rm, source.needs_rm):
            log.info(line)
        if self.monitor_settings.enabled:  # the probe signal needs probes scored every N steps
            probes_every = (config.evals.probes.every if "probes" in config.evals.names()
                            else -1)
            traits = RunTraits.from_reward_type(
                config.reward.type, probes=bool(config.probes.triples) and probes_every > 0,
                marker=self.setup.answer_marker is not None)
            for line in RunMonitor(self.monitor_settings).header(traits):
                log.info(line)

    # -- set-up
    def _policy(self, tokenizer, key):
        """(ModelConfig, params) of the policy, after the SFT warm start of a new run."""
        c = self.config
        cfg, params = build_model(c.model, tokenizer, self.mesh, jax.random.fold_in(key, 1),
                                  kernels=c.kernels.impl)
        if c.sft.steps and not self.resuming:
            params, losses = sft.warm_start_with(sft.SFTSettings.from_config(c), params, cfg,
                                                 tokenizer, self.records.train)
            log.info("SFT warm start: %d steps, loss %.3f -> %.3f", len(losses), losses[0],
                     losses[-1])
            params = jax.device_put(params, parallel.param_shardings(cfg, self.mesh))
        # LoRA: the (warm-started) policy is the frozen base, its fresh adapters train
        return with_lora(c.model, cfg, params, self.mesh, jax.random.fold_in(key, 3))

    def _initial_state(self, policy_params, source) -> TrainState:
        """The train state; under LoRA only the trainable parts (`models.lora.split`) get AdamW
        state, the frozen bases ride beside them and the policy's base is the KL reference."""
        self.tx = policy_optimizer(self.config.optim, self.config.train.steps)
        self.rm_tx = rm_optimizer(RMOptimizerSettings.for_cooper(
            self.config.cooper, self.config.train.steps)) if self.rm else None
        # Co-rewarding-II: the EMA teacher is also the KL reference.
        needs_ref = (self.config.rl.kl_coef > 0 or source.needs_teacher
                     or self.config.rl.log_kl_to_start) and self.policy_cfg.lora is None
        ref = jax.tree_util.tree_map(jnp.copy, policy_params) if needs_ref else None
        policy_base, policy = lora.split(policy_params, self.policy_cfg)
        rm_base, rm = lora.split(self.rm.params, self.rm.config) if self.rm else (None, None)
        moving_kl = self.config.rl.kl_in_reward and self.config.rl.kl_controller != "fixed"
        return place_state(init_state(policy, self.tx, ref_params=ref, rm_params=rm,
                                      rm_tx=self.rm_tx, policy_base=policy_base,
                                      rm_base=rm_base,
                                      kl_coef=self.config.rl.kl_coef if moving_kl else None),
                           self.mesh)

    def lora_bases(self) -> dict[str, str]:
        """Where each LoRA base comes from ({"policy": "checkpoint" or its hf_path, "rm": ...}):
        a checkpoint holds the bases the run cannot load again from an hf_path (an SFT warm
        start's result, a random architecture, a `rm.checkpoint`)."""
        c, out = self.config, {}
        if self.policy_cfg.lora is not None:
            out["policy"] = (c.model.hf_path if c.model.hf_path and not c.sft.steps
                             else "checkpoint")
        if self.rm is not None and self.rm.config.lora is not None:
            out["rm"] = (c.reward_model.hf_path if c.reward_model.hf_path
                         and not c.rm.checkpoint else "checkpoint")
        return out

    def _checkpointed_bases(self) -> tuple[str, ...]:
        return tuple(f"{m}_base" for m, where in self.lora_bases().items()
                     if where == "checkpoint")

    def _sampler(self, tokenizer, valid_vocab: int):
        """The compiled sampler of `rollout.engine`: the static batch, or `rollout.slots`
        continuous-batching decode slots (`sampling.engine`)."""
        r = self.config.rollout
        scfg = sampling.SamplingConfig(
            temperature=r.temperature, top_k=r.top_k, top_p=r.top_p, num_samples=r.group_size,
            eos_ids=stop_token_ids(tokenizer), pad_id=tokenizer.pad_token_id,
            valid_vocab=valid_vocab, max_new_tokens=r.max_new_tokens)
        return sampling.make_sampler(self.policy_cfg, scfg, r.engine,
                                     r.prompts_per_step * r.group_size, r.slots, r.slot_halvings)

    strict: dict = {}  # the evaluation's strict verifiers, set with the host tools

    def _host_tools(self, stack: contextlib.ExitStack) -> tuple[HostTools, RuleVerifier]:
        """(the loop's host tools, the evaluation's verifier); sets the evaluation's strict
        verifiers (`strict_verifiers`)."""
        c = self.config
        verifiers = make_verifiers(c, stack)
        self.strict = strict_verifiers(c.data.dataset, c.verifier.num_workers,
                                       c.verifier.timeout_s, stack)
        if extraction_roles(c)["gold"] == "strict_numeric":  # the run's gold: report it beside
            self.strict = {"strict": verifiers["gold"]}
        background = stack.enter_context(concurrent.futures.ThreadPoolExecutor(max_workers=1))
        tools = HostTools(verifiers["reward"], verifiers["eval"], background,
                          pair_verifier=verifiers["pairs"], gold_verifier=verifiers["gold"])
        if self.setup.source.trains_rm and cooper.negative_strategy(
                c.cooper.negative).needs_assistant:
            tools.rewriter = cooper.make_rewriter(cooper.AssistantSettings.from_config(c),
                                                  self.mesh)
        return tools, verifiers["eval"]

    # -- evaluation (config.evals), checkpoints
    def eval_context(self, verifier) -> evaluators.EvalContext:
        """What the run's evaluators see: the policy and RM as they are when called."""
        return evaluators.EvalContext(
            self.eval_settings, lambda: self.state.policy_weights(), self.policy_cfg,
            self.setup.tokenizer, self.records.heldout, verifier, self.strict,
            rm=None if self.rm is None else (lambda: self.state.rm_weights()),
            rm_model=self.rm, probes=self.hack_probes)

    _probes: list | None = None  # the probe triples, read on first use
    _format_probes: list | None = None  # built on first use

    def hack_probes(self) -> dict:
        """The hack probes' and the format probes' metrics (`coop_jax.trainer.probes`; {}
        without `probes.triples` and `probes.format_questions`)."""
        s, metrics = self.probe_settings, {}
        rm = self.rm and (self.state.rm_weights(), self.rm.config, self.rm.tokenizer,
                          self.setup.rm_format)
        if s.triples:
            if self._probes is None:
                self._probes = probes.read_probes(s.triples)
            metrics |= probes.probe_metrics(self._probes, (self.state.policy_weights(),
                                                           self.policy_cfg, self.setup.tokenizer),
                                            rm, s)
        if s.format_questions and rm and self.setup.answer_marker:
            if self._format_probes is None:
                self._format_probes = format_probes(self.records.heldout, s.format_questions,
                                                    self.setup.answer_marker)
            metrics |= probes.format_metrics(self._format_probes, rm, self.setup.answer_marker,
                                             s.batch_size)
        return metrics

    def meta(self, step: int, extra: dict) -> dict:
        meta = {"step": step, "config": self.config.to_dict(),
                "tokenizer": tokenizer_path(self.config),
                "policy_model_config": checkpoint.model_config_to_dict(self.policy_cfg)}
        if self.rm is not None:  # the RM's own tokenizer, for whoever loads it from here
            meta.update(rm_model_config=checkpoint.model_config_to_dict(self.rm.config),
                        rm_tokenizer=self.rm.tokenizer_path)
        meta.update({f"{m}_base": where for m, where in self.lora_bases().items()})
        return meta | extra

    def save(self, feed: RolloutFeed, done: int, facts: dict) -> None:
        feed_meta, host_items = feed.checkpoint()
        self.ckpt.save(done, self.state, self.meta(done, facts | feed_meta),
                       host_items=host_items, bases=self._checkpointed_bases())

    # -- the reward-hacking monitor (monitor.enabled), the metrics' writers
    def writer(self, start: RunStart) -> MetricWriter:
        """metrics.jsonl, TensorBoard and, with `wandb.project`, Weights & Biases."""
        w = self.config.wandb
        return MetricWriter(self.workdir, start.step if self.resuming else None,
                            primary=jax.process_index() == 0, wandb_project=w.project or None,
                            wandb_dir=w.dir or None, wandb_mode=w.mode or None,
                            wandb_config=self.config.to_dict() if w.project else None)

    def run_monitor(self, start: RunStart) -> RunMonitor | None:
        """The run's monitor (None when off); a resumed run's replays the kept rows up to its
        checkpoint, so it alarms where an uninterrupted run would."""
        if not self.monitor_settings.enabled:
            return None
        monitor = RunMonitor(self.monitor_settings)
        if self.resuming:
            alarms = monitor.replay(read_metrics(self.workdir), start.step)
            for alarm in alarms:  # their checkpoints stay kept after the resume
                self.ckpt.protect(alarm.step)
            log.info("monitor: replayed the kept metrics up to step %d (%s)", start.step,
                     ", ".join(f"{a.signal} alarmed at step {a.step}" for a in alarms)
                     or "no alarm")
        return monitor

    @staticmethod
    def log_row(writer: MetricWriter, monitor: RunMonitor | None, step: int,
                metrics: dict) -> tuple[dict, Verdict]:
        """Write one step's row, seen by the monitor first: its alarms' lines are logged and
        its metrics merged into the row; (the row, the monitor's verdict)."""
        verdict = QUIET if monitor is None else monitor.observe(metrics_row(step, metrics))
        for line in verdict.lines:
            log.warning(line)
        return writer.write(step, metrics | verdict.metrics), verdict

    def _start(self, feed: RolloutFeed, pipeline, eval_verifier) -> RunStart:
        """Resume from the newest checkpoint, or evaluate the initial policy and save step 0."""
        if self.resuming:
            self.state, meta = self.ckpt.restore(self.state, bases=self._checkpointed_bases())
            pipeline.restore(meta["data"])
            feed.resume(int(self.state.step), meta, self.ckpt)
            facts = {k: meta.get(k) for k in ("initial_accuracy", "initial_sampled_accuracy",
                                              "initial_headline_accuracy")}
            facts["wall_seconds_before"] = meta.get("wall_seconds_before", 0.0)
            log.info("resumed from step %d", int(self.state.step))
            return RunStart(int(self.state.step), facts, None)
        initial = evaluators.run_due(self.eval_context(eval_verifier), 0, False)
        facts = {"initial_accuracy": initial.get("eval/greedy_accuracy"),
                 "initial_sampled_accuracy": initial.get("eval/sampled_accuracy"),
                 "initial_headline_accuracy": initial.get("eval/headline_accuracy"),
                 "wall_seconds_before": 0.0}
        self.save(feed, 0, facts)
        return RunStart(0, facts, initial)

    # -- one step
    def update(self, step: int, prepared: PreparedBatch, nan_skips: int) -> tuple[dict, int]:
        """The compiled update on `prepared`, kept unless its loss is not finite
        (`train.nan_policy`): (the step's metrics, the number of skipped updates so far)."""
        c = self.config
        t0 = time.perf_counter()
        new_state, outputs = self.step(self.state, prepared.batch)  # dispatched asynchronously
        step_metrics = jax.device_get(outputs.metrics)
        host_metrics = prepared.metrics | self._rm_label_metrics(prepared, outputs)
        metrics = parallel.host.reduce_metrics(host_metrics)
        metrics["time/update"] = time.perf_counter() - t0
        if np.isfinite(step_metrics["loss"]):
            self.state = new_state
        elif c.train.nan_policy == "error" or nan_skips >= c.train.max_nan_skips:
            raise FloatingPointError(f"non-finite loss ({step_metrics['loss']}) at step {step}")
        else:
            nan_skips += 1
            log.warning("non-finite loss at step %d: update skipped", step)
            metrics["skipped_update"] = 1
        return metrics | step_metrics, nan_skips

    def _rm_label_metrics(self, prepared: PreparedBatch, outputs: StepOutputs) -> dict:
        """The RM's agreement with the rule labels of the step's rollouts, before (and, for
        Cooper, after) its update, and the groups without a correct rollout
        (`all_wrong_group_metrics`); finishes the labels verified in the background. AUC and the
        pairwise accuracy are not means over rows, so every host computes them over all hosts'
        rows (the global scores, every host's labels in process order) rather than its own."""
        labels, metrics = prepared.labels, {}
        if prepared.pending is not None:
            labels, metrics = finish_rule_labels(prepared.pending)
        if labels is None:  # dynamic sampling's refilled batch: its rows' labels are not kept
            return metrics
        labels = parallel.host.gather_rows(labels)
        g = self.config.rollout.group_size
        advantages = parallel.host.fetch(outputs.advantages)
        if len(advantages) == len(labels):  # one trained view (a second has no rule labels)
            metrics |= all_wrong_group_metrics(labels, advantages, g)
        if outputs.rm_scores is None:
            return metrics
        for suffix, scores in (("", outputs.rm_scores), ("_after", outputs.rm_scores_after)):
            if scores is not None:
                metrics |= rm_label_metrics(parallel.host.fetch(scores), labels, g, suffix)
        return metrics

    def before_step(self, step: int) -> dict:
        """The reward source's per-step hook (Co-rewarding-II's EMA teacher)."""
        hook = self.setup.source.before_step
        if hook is None:
            return {}
        self.state, metrics = hook(self.state, step, self.setup.reward_options)
        return metrics

    # -- the loop
    def run(self) -> dict:
        c = self.config
        pipeline = data.PromptPipeline(self.records.train, batch_size=c.rollout.prompts_per_step,
                                       seed=c.seed)
        start_time = time.time()
        with contextlib.ExitStack() as stack:
            stop = stack.enter_context(_StopOnSigterm())
            tools, eval_verifier = self._host_tools(stack)
            feed = RolloutFeed(self.setup, pipeline, tools, stack)
            start = self._start(feed, pipeline, eval_verifier)
            context = self.eval_context(eval_verifier)
            writer = self.writer(start)
            monitor = self.run_monitor(start)
            if start.initial is not None:  # step 0 of the curves: the policy (and RM) before RL
                self.log_row(writer, monitor, 0, start.initial)  # in the monitor's warm-up
            nan_skips, final = 0, None
            # log lines (the monitor's alarms, warnings) each on a line of their own above the bar
            stack.enter_context(console.log_above_bars(log))
            bar = tqdm.tqdm(range(start.step, c.train.steps), initial=start.step,
                            total=c.train.steps, desc="coop-train",
                            disable=jax.process_index() != 0)
            for step in bar:
                t_step = time.perf_counter()
                # -- before_step, rollouts (sample -> decode -> verify -> reward -> pairs), update
                metrics = self.before_step(step)
                prepared = feed.next(step, self.state)
                step_metrics, nan_skips = self.update(step, prepared, nan_skips)
                metrics.update(step_metrics)
                metrics["time/step"] = time.perf_counter() - t_step
                metrics["tokens_per_second"] = metrics["generated_tokens"] / metrics["time/step"]
                # -- evaluate
                done = step + 1
                last = done == c.train.steps
                metrics.update(evaluators.run_due(context, done, last))
                final = metrics if last else final
                # -- log, checkpoint
                row, verdict = self.log_row(writer, monitor, done, metrics)
                bar.set_postfix(reward=f"{row.get('reward_mean', 0):.3f}",
                                acc=f"{row.get('rule_accuracy', 0):.3f}",
                                **({"alarm": monitor.first_alarm.signal}
                                   if monitor and monitor.first_alarm else {}))
                # every host saves, or none (the monitor sees the same rows on every host, reduced
                # over all of them, but a resumed host without the kept metrics has no history)
                stopping = parallel.host.any_process(stop.requested or verdict.stop)
                alarm_save = monitor is not None and parallel.host.any_process(verdict.checkpoint)
                if alarm_save:  # kept through train.keep_checkpoints' rotation
                    self.ckpt.protect(done)
                if stopping or alarm_save or evaluators.due(done, c.train.checkpoint_every, last):
                    wall = start.facts["wall_seconds_before"] + time.time() - start_time
                    self.save(feed, done, start.facts | {"wall_seconds_before": wall})
                if stopping:
                    writer.close()
                    if stop.requested and not verdict.stop:
                        log.warning("SIGTERM: checkpoint saved at step %d, exiting", done)
                        return {"stopped_at": done}
                    return self._stop_on_alarm(done, verdict)
            writer.close()
            if final is None:  # resumed a run that had already finished its steps
                final = evaluators.run_after_resume(context)
            # every host's verifier pool checked its own rows
            every_host = parallel.host.gather_json(tools.verifier.stats.as_dict())
            verifier_stats = {k: sum(host[k] for host in every_host) for k in every_host[0]}
        wall = start.facts["wall_seconds_before"] + time.time() - start_time
        return self._finish(start.facts, final, verifier_stats, wall)

    def _finish(self, facts: dict, final: dict, verifier_stats: dict, wall: float) -> dict:
        """The run's summary.json (and curves.png), written by process 0."""
        c = self.config
        summary = {
            "method": c.reward.type, "reward_type": c.reward.type, "seed": c.seed,
            "steps": c.train.steps,
            "initial_accuracy": facts.get("initial_accuracy"),
            "initial_sampled_accuracy": facts.get("initial_sampled_accuracy"),
            "final_accuracy": final.get("eval/greedy_accuracy"),
            "final_sampled_accuracy": final.get("eval/sampled_accuracy"),
            # the headline metric (eval.headline) and its values; the two above are greedy/avg@k
            "headline": headline_name(c), "headline_verifier": "lenient",
            "initial_headline_accuracy": facts.get("initial_headline_accuracy"),
            "final_headline_accuracy": final.get("eval/headline_accuracy"),
            "wall_seconds": wall, "skipped_rows": self.records.skipped,
            "verifier": verifier_stats,
        }
        if "eval/greedy_accuracy_strict" in final:  # GSM8K: the references' strict scorer
            summary["final_accuracy_strict"] = final["eval/greedy_accuracy_strict"]
            summary["final_sampled_accuracy_strict"] = final["eval/sampled_accuracy_strict"]
        if "rm_heldout_accuracy" in final:
            summary["rm_heldout_accuracy"] = final["rm_heldout_accuracy"]
        if jax.process_index() == 0:
            with open(os.path.join(self.workdir, "summary.json"), "w") as f:
                json.dump(summary, f, indent=2)
            self.plot()
        self.ckpt.close()
        return summary

    def plot(self) -> None:
        """curves.png of the run's metrics, with the monitor panel when the monitor is on."""
        plot_curves({os.path.basename(os.path.abspath(self.workdir)): read_metrics(self.workdir)},
                    os.path.join(self.workdir, "curves.png"),
                    monitor=self.monitor_settings if self.monitor_settings.enabled else None)

    def _stop_on_alarm(self, done: int, verdict: Verdict) -> dict:
        """monitor.action=stop: the checkpoint of step `done` is saved; curves.png, and what
        the run returns. A rerun resumes from the checkpoint and goes on (the alarmed signals
        do not alarm again)."""
        log.warning("monitor: checkpoint saved at step %d, stopping (monitor.action=stop); a "
                    "rerun of the same command resumes past the alarm", done)
        if jax.process_index() == 0:
            self.plot()
        self.ckpt.close()
        return {"stopped_at": done, "stopped_by": "monitor",
                "alarms": [a.to_json() for a in verdict.alarms]}


def train(config, workdir: str) -> dict:
    """Run `config` (a ConfigDict, as the projects build it, or the typed config) in `workdir`."""
    return Trainer(config_lib.typed(config), workdir).run()
