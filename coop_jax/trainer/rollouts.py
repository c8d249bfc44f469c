"""The host half of an RL step: sample -> decode -> verify -> reward -> pairs -> `TrainBatch`.

Every stage is a function of explicit inputs that returns a named result; none of them changes
the trainer. `RolloutSetup` holds what the stages share and never changes during a run (the
settings, the mesh, tokenizers, the compiled sampler). `RolloutFeed` decides when each step's batch
is made: in series, or one step ahead (`rollout.overlap`). `RolloutSettings` is what they read of
the config, built once by the entry point.

Rows are prompt-major (row r = rollout r % G of prompt r // G), and each host holds its block of
the step's prompts (`coop_jax.parallel.host`).
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from coop_jax.rm import cooper
from coop_jax.trainer import rewards
from coop_jax import data, parallel, rl, sampling, stats
from coop_jax.registry import Options
from coop_jax.rm.input import RMInputFormat
from coop_jax.rm.step import RMInputs
from coop_jax.trainer.batch import Behaviour, TrainBatch
from coop_jax.verify import RuleVerifier

PENDING_ROLLOUTS = "pending_rollouts"  # the checkpoint item of rollout.overlap's next batch


@dataclasses.dataclass(frozen=True)
class RolloutSettings:
    """What the host stages read of the config (`rollout`, `data`, `rl`'s shaping and dynamic
    sampling, `cooper`'s pairs), built once by the entry point (`from_config`)."""
    seed: int
    steps: int
    prompts_per_step: int
    group_size: int
    max_new_tokens: int
    prompt_template: str
    chat_template: bool
    max_prompt_len: int
    view_fields: tuple[str, ...]  # the record field each trained view's prompt is built from
    overlong: str
    overlong_cache_len: int
    overlong_factor: float
    overlap: bool
    # the batch carries the sampler's log-probs (`TrainBatch.behaviour`): rollout.overlap's old
    # log-probs, or the sampler side of truncated importance sampling (rl.tis_cap)
    keeps_sampler_logprobs: bool
    dynamic_sampling: bool
    dynamic_max_draws: int
    pairs: cooper.PairSettings | None = None  # Cooper's RM pairs (None: the RM is not trained)

    @classmethod
    def from_config(cls, config, source: rewards.RewardSource) -> "RolloutSettings":
        r, d, rl_ = config.rollout, config.data, config.rl
        return cls(
            seed=config.seed, steps=config.train.steps, prompts_per_step=r.prompts_per_step,
            group_size=r.group_size, max_new_tokens=r.max_new_tokens,
            prompt_template=d.prompt_template, chat_template=bool(d.chat_template),
            max_prompt_len=d.max_prompt_len,
            view_fields=("question", d.rephrase_field)[:source.num_views],
            overlong=rl_.overlong, overlong_cache_len=rl_.overlong_cache_len,
            overlong_factor=rl_.overlong_factor, overlap=bool(r.overlap),
            keeps_sampler_logprobs=bool(r.overlap) or rl_.tis_cap > 0,
            dynamic_sampling=bool(rl_.dynamic_sampling), dynamic_max_draws=rl_.dynamic_max_draws,
            pairs=cooper.PairSettings.from_config(config) if source.trains_rm else None)


@dataclasses.dataclass(frozen=True)
class RolloutSetup:
    """What the host stages of every step share (fixed for the run)."""
    settings: RolloutSettings
    mesh: Any
    source: rewards.RewardSource
    tokenizer: Any
    sample: Callable          # the compiled sampler: (params, ids, mask, key) -> sampling.Rollouts
    rm_tokenizer: Any = None  # None: the run has no reward model
    rm_format: RMInputFormat | None = None
    reward_options: Options = Options()  # the reward type's declared host parameters
    answer_marker: str | None = None  # the task's answer marker ("####"; None: it has none)

    @property
    def group_size(self) -> int:
        return self.settings.group_size


@dataclasses.dataclass
class HostTools:
    """Host-side helpers that live for the loop's duration."""
    verifier: RuleVerifier          # the rewards' (the run's extraction mode)
    lenient_verifier: RuleVerifier  # the evaluation's (lenient), also Cooper's full-text check
    background: concurrent.futures.ThreadPoolExecutor  # rule labels that nothing waits on
    rewriter: Callable | None = None                    # a negative strategy's assistant
    pair_verifier: RuleVerifier | None = None  # labels Cooper's pairs (cooper.pair_labels; None:
    #                                            the rewards')
    gold_verifier: RuleVerifier | None = None  # the RM diagnostics' gold (verifier.gold; None:
    #                                            the rewards')


@dataclasses.dataclass(frozen=True)
class RuleLabels:
    """A step's rollouts labelled by each rule the run uses: the rewards' (`reward`, with its
    extracted answers), Cooper's pairs' (`pairs`) and the gold of the RM diagnostics (`gold`).
    Where two roles share a verifier they share one array."""
    reward: np.ndarray
    extracted: list[str | None]
    pairs: np.ndarray
    pair_extracted: list[str | None]
    gold: np.ndarray
    metrics: dict  # rule_accuracy, verifier_timeouts, and gold_accuracy under another gold


def label_rollouts(tools: HostTools, references: list[str], texts: list[str]) -> RuleLabels:
    """`RuleLabels` of `texts`: one verifier pass per distinct rule."""
    done: dict[int, tuple] = {}

    def under(verifier):
        verifier = verifier or tools.verifier
        if id(verifier) not in done:
            done[id(verifier)] = rewards.rule_labels(verifier, references, texts)
        return done[id(verifier)]

    labels, extracted, timeouts = under(tools.verifier)
    pairs, pair_extracted, _ = under(tools.pair_verifier)
    gold, _, _ = under(tools.gold_verifier)
    metrics = {"rule_accuracy": labels.mean(), "verifier_timeouts": timeouts}
    if gold is not labels:
        metrics["gold_accuracy"] = gold.mean()
    return RuleLabels(labels, extracted, pairs, pair_extracted, gold, metrics)


def marker_rate(texts: list[str], marker: str | None) -> dict:
    """{"rollout/marker_rate": the share of `texts` that write the task's answer marker} (empty
    for a task without one)."""
    if not marker or not texts:
        return {}
    return {"rollout/marker_rate": float(np.mean([marker in t for t in texts]))}


@dataclasses.dataclass
class SampledRollouts:
    """A step's sampler outputs: device arrays that may still be being computed."""
    views: list                               # sampling.Rollouts, one per trained view
    teacher: sampling.Rollouts | None = None  # the EMA teacher's (needs_teacher)
    padding_waste: Any = None  # () replicated: `padding_waste` of view 0's lengths

    def __post_init__(self):
        if self.padding_waste is None:
            self.padding_waste = padding_waste(self.views[0].lengths)


@dataclasses.dataclass
class DecodedRollouts:
    """This host's rows of the samples, and their texts."""
    views: list                      # sampling.Rollouts of this host's rows, one per view
    texts: list[list[str]]           # their decoded texts, per view
    teacher: list[str] | None = None  # the EMA teacher's decoded rollouts


@dataclasses.dataclass
class ScoredRollouts:
    """Rule labels and the reward source's host rewards of view 0 (and its other views)."""
    host_rewards: list[np.ndarray]      # one per view
    rule: RuleLabels | None             # None while verified in the background (`pending`)
    pending: concurrent.futures.Future | None  # of a RuleLabels
    metrics: dict

    @property
    def labels(self) -> np.ndarray | None:
        """The rewards' rule labels."""
        return None if self.rule is None else self.rule.reward


@dataclasses.dataclass
class PreparedBatch:
    """A step's batch, its host metrics and the rule labels still being verified (or None)."""
    batch: TrainBatch
    metrics: dict
    pending: concurrent.futures.Future | None = None  # of a RuleLabels
    labels: np.ndarray | None = None  # view 0's labels under the gold (None: pending)


# ---------------------------------------------------------------------- sample
@jax.jit
def padding_waste(lengths):
    """The share of a static batch's decode row-steps spent on rows that had already finished:
    every row runs until the longest stops, so 1 - mean(length) / max(length) over all hosts'
    rows (computed on device, on the main thread: the arrays are global)."""
    lengths = lengths.astype(jnp.float32)
    return 1.0 - lengths.mean() / jnp.maximum(lengths.max(), 1.0)


def rollout_key(seed: int, step: int, draw: int = 0):
    return jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), step), draw)


def _generate(setup: RolloutSetup, params, records, key, question_key="question"):
    """Rollouts of every host's prompts, as global arrays each host can read its rows of."""
    s = setup.settings
    prompts = [data.format_prompt(s.prompt_template, r[question_key] or r["question"],
                                  tokenizer=setup.tokenizer, chat=s.chat_template)
               for r in records]
    ids, mask = sampling.tokenize_prompts(setup.tokenizer, prompts, s.max_prompt_len)
    batch = parallel.host.global_batch({"ids": ids, "mask": mask}, setup.mesh)
    out = setup.sample(params, batch["ids"], batch["mask"], key)
    return jax.tree_util.tree_map(parallel.host.host_aligned, out)


def sample_rollouts(setup: RolloutSetup, policy_params, teacher_params, records, key
                    ) -> SampledRollouts:
    """G rollouts of every prompt under `policy_params`, one set per view, and, where the reward
    needs it, under the EMA teacher. Only dispatched: the device computes them while the caller
    goes on."""
    views = [_generate(setup, policy_params, records, jax.random.fold_in(key, view), field)
             for view, field in enumerate(setup.settings.view_fields)]
    teacher = None
    if setup.source.needs_teacher:
        teacher = _generate(setup, teacher_params, records, jax.random.fold_in(key, 2))
    return SampledRollouts(views, teacher)


# ---------------------------------------------------------------------- decode
def decode_rollouts(setup: RolloutSetup, samples: SampledRollouts) -> DecodedRollouts:
    """This host's rows of the samples, and their texts (waits for the sampler)."""
    local = lambda out: jax.tree_util.tree_map(parallel.host.local_rows, out)
    decode = lambda out: sampling.decode_texts(setup.tokenizer, out)
    views = [local(out) for out in samples.views]
    teacher = None if samples.teacher is None else decode(local(samples.teacher))
    return DecodedRollouts(views, [decode(out) for out in views], teacher)


# ---------------------------------------------------------------------- verify and reward
def score_rollouts(setup: RolloutSetup, records: list[dict], rollouts: DecodedRollouts,
                   tools: HostTools, step: int = 0) -> ScoredRollouts:
    """Rule labels (in the background when no reward waits for them) and the host rewards."""
    texts, g = rollouts.texts[0], setup.group_size
    references = [records[i // g]["reference"] for i in range(len(texts))]
    metrics, pending, rule = {}, None, None
    if setup.source.uses_rule_labels:
        rule = label_rollouts(tools, references, texts)
        metrics.update(rule.metrics)
    else:
        pending = tools.background.submit(label_rollouts, tools, references, texts)
    host_rewards, host_metrics = setup.source.host(rewards.RewardInputs(
        records, rollouts.texts, rule and rule.reward, rule and rule.extracted, rollouts.teacher,
        g, tools.verifier, setup.reward_options, step))
    return ScoredRollouts(host_rewards, rule, pending, metrics | host_metrics)


def finish_rule_labels(pending: concurrent.futures.Future) -> tuple[np.ndarray, dict]:
    """(gold labels, rule accuracy metrics) of labels verified while the device updated."""
    rule = pending.result()
    return rule.gold, rule.metrics


def rm_label_metrics(scores: np.ndarray, labels: np.ndarray, group_size: int,
                     suffix: str = "") -> dict:
    """How well an RM's raw scores of this step's rollouts agree with their rule labels (the
    hacking measure, on the policy's own rollouts): pointwise accuracy (score > 0 as "correct"),
    balanced accuracy (the mean of the accuracies on right and on wrong rollouts, so that "all
    wrong" reads 0.5 however rare right answers are; None without both), AUC, and the pairwise
    accuracy of correct over wrong rollouts of the same prompt (ties 1/2; None when the step has
    no such pair)."""
    scores, labels = np.asarray(scores, np.float64), np.asarray(labels) > 0.5
    wins = pairs = 0.0
    for s, c in zip(scores.reshape(-1, group_size), labels.reshape(-1, group_size)):
        diff = s[c][:, None] - s[~c][None, :]  # every (correct, wrong) pair of the group
        wins += float((diff > 0).sum() + 0.5 * (diff == 0).sum())
        pairs += diff.size
    accepted = scores > 0
    balanced = (float(np.mean(accepted[labels]) + np.mean(~accepted[~labels])) / 2
                if labels.any() and not labels.all() else None)
    return {f"rm_rule_agreement{suffix}": float(np.mean(accepted == labels)),
            f"rm_balanced_accuracy{suffix}": balanced,
            f"rm_onpolicy_auc{suffix}": stats.roc_auc(scores, labels.astype(np.float64)),
            f"rm_onpolicy_pair_accuracy{suffix}": wins / pairs if pairs else None}


def all_wrong_group_metrics(labels: np.ndarray, advantages: np.ndarray, group_size: int) -> dict:
    """Where a learned reward can steer the policy that the rule reward cannot: the fraction of
    groups with no rule-correct rollout, and the mean |advantage| of their rollouts (None
    without such a group). GRPO's (r - mean) / (std + eps) makes full-size advantages there out
    of whatever differences the reward has; the rule reward gives them exactly 0."""
    wrong = ~(np.asarray(labels) > 0.5).reshape(-1, group_size).any(axis=1)
    size = np.abs(np.asarray(advantages, np.float64)).reshape(-1, group_size)[wrong]
    return {"all_wrong_group_fraction": float(wrong.mean()),
            "all_wrong_advantage_abs_mean": float(size.mean()) if size.size else None}


# ---------------------------------------------------------------------- the batch
def _view_batch(s: RolloutSettings, out, host_rewards: np.ndarray) -> TrainBatch:
    lengths, truncated = np.asarray(out.lengths), np.asarray(out.truncated)
    shaped, loss_weight = rl.apply_overlong(
        s.overlong, jnp.asarray(host_rewards), jnp.asarray(lengths), jnp.asarray(truncated),
        max_len=s.max_new_tokens, cache_len=s.overlong_cache_len, factor=s.overlong_factor)
    behaviour = None
    if s.keeps_sampler_logprobs:  # overlap: the PPO ratio's old log-probs (the behaviour policy
        # is one step old; without the entropies, of older pending rollouts, the step recomputes
        # them); rl.tis_cap: the sampler's side of the importance weights
        behaviour = Behaviour(np.asarray(out.logprobs, np.float32),
                              None if out.entropy is None else np.asarray(out.entropy,
                                                                          np.float32))
    rewards_ = host_rewards.astype(np.float32)
    return TrainBatch(
        prompt_tokens=np.asarray(out.prompt_tokens), prompt_mask=np.asarray(out.prompt_mask),
        tokens=np.asarray(out.tokens), mask=np.asarray(out.mask), rewards=rewards_,
        reward_bonus=np.asarray(shaped, np.float32) - rewards_,
        loss_weight=np.asarray(loss_weight, np.float32), behaviour=behaviour)


def make_batch(setup: RolloutSetup, records, rollouts: DecodedRollouts, scored: ScoredRollouts
               ) -> TrainBatch:
    """This host's rows of the step's batch: every view's rows, then the RM's inputs of view 0."""
    batch = TrainBatch.concat_views([_view_batch(setup.settings, out, r) for out, r in
                                     zip(rollouts.views, scored.host_rewards)])
    if setup.rm_tokenizer is None:
        return batch
    g = setup.group_size
    rows = [(records[i // g]["question"], records[i // g]["reference"], t)
            for i, t in enumerate(rollouts.texts[0])]
    tokens, mask = setup.rm_format.tokenize(setup.rm_tokenizer, rows)
    return batch.replace(rm=RMInputs(tokens, mask))


# ---------------------------------------------------------------------- pairs (Cooper)
def rm_pairs(setup: RolloutSetup, step: int, records, texts, scored: ScoredRollouts,
             tools: HostTools):
    """Cooper: the (positive, negative) pairs of the RM update, tokenised (one per prompt), or
    as rollout indices for a negative the step picks by the RM's scores (k per prompt); with
    `cooper.pair_label_noise`, some marked to be swapped."""
    p = setup.settings.pairs
    spec = cooper.negative_strategy(p.negative)
    first_prompt = jax.process_index() * len(records)
    references = cooper.reference_solutions(records) if p.reference_positive else None
    labels = scored.rule.pairs
    if spec.on_device:
        pairs, stats = spec.candidates(labels, setup.group_size, p.pairs_per_group,
                                       references and [r is not None for r in references])
        if references is not None:
            pairs = cooper.with_reference_positives(pairs, records, references,
                                                    setup.rm_tokenizer, setup.rm_format)
    else:
        prompts = [data.format_prompt(setup.settings.prompt_template, r["question"])
                   for r in records]
        texts_, stats = cooper.build_pairs(
            p.negative, records, texts, labels, scored.rule.pair_extracted,
            setup.group_size, verifier=tools.pair_verifier or tools.verifier,
            rewriter=tools.rewriter,
            seed=(p.seed, step), first_prompt=first_prompt, tries=p.rewrite_tries,
            prompts=prompts, keep_rule=p.negative_check,
            full_text_verifier=tools.lenient_verifier, references=references)
        pairs = cooper.tokenize_pairs(setup.rm_tokenizer, records, texts_, setup.rm_format)
    if p.pair_label_noise:
        per_prompt = len(pairs.valid) // len(records)
        pairs = pairs.replace(swap=cooper.label_swaps(
            len(pairs.valid), p.pair_label_noise, (p.seed, step, 1),
            first_pair=first_prompt * per_prompt))
    return pairs, stats


def prepare_batch(setup: RolloutSetup, step: int, records: list[dict],
                  samples: SampledRollouts, tools: HostTools) -> PreparedBatch:
    """The host half of one step from its samples: decode, verify, reward, pairs, the batch."""
    t0 = time.perf_counter()
    rollouts = decode_rollouts(setup, samples)
    t1 = time.perf_counter()
    scored = score_rollouts(setup, records, rollouts, tools, step)
    metrics = scored.metrics | {"time/sample": t1 - t0, "time/verify": time.perf_counter() - t1}
    batch = make_batch(setup, records, rollouts, scored)
    if setup.source.trains_rm:
        t0 = time.perf_counter()
        pairs, pair_stats = rm_pairs(setup, step, records, rollouts.texts[0], scored, tools)
        batch = batch.replace(pairs=pairs)
        metrics.update(pair_stats)
        metrics["time/pairs"] = time.perf_counter() - t0
    out = rollouts.views[0]
    metrics.update(response_length=float(np.asarray(out.lengths).mean()),
                   truncated_fraction=float(np.asarray(out.truncated).mean()),
                   generated_tokens=int(np.asarray(out.mask).sum()),
                   # replicated: this host's copy (no collective: this may run in a thread)
                   **{"rollout/padding_waste": float(
                       samples.padding_waste.addressable_shards[0].data)},
                   **marker_rate(rollouts.texts[0], setup.answer_marker))
    return PreparedBatch(batch, metrics, scored.pending, scored.rule and scored.rule.gold)


def collect(setup: RolloutSetup, state, step: int, records: list[dict], tools: HostTools,
            draw: int = 0) -> PreparedBatch:
    """Rollouts of the state's policy, then the host half of the step (`prepare_batch`)."""
    samples = sample_rollouts(setup, state.policy_weights(), state.ref_params, records,
                              rollout_key(setup.settings.seed, step, draw))
    return prepare_batch(setup, step, records, samples, tools)


def collect_informative(setup: RolloutSetup, state, step: int, pipeline, tools: HostTools
                        ) -> PreparedBatch:
    """DAPO dynamic sampling: drop groups whose rewards are all equal, refill from further
    prompts (at most rl.dynamic_max_draws draws)."""
    b, g = setup.settings.prompts_per_step, setup.group_size
    draw_metrics = []

    def draw():
        prepared = collect(setup, state, step, pipeline.next_batch(), tools,
                           draw=len(draw_metrics))
        draw_metrics.append(prepared.metrics)
        return {k: v.reshape((b, g) + v.shape[1:]) for k, v in prepared.batch.to_flat().items()}

    groups, stats = rl.fill_batch(draw, b, setup.settings.dynamic_max_draws)
    batch = TrainBatch.from_flat({k: v.reshape((b * g,) + v.shape[2:]) for k, v in groups.items()})
    return PreparedBatch(batch, draw_metrics[0] | {f"dynamic/{k}": v for k, v in stats.items()})


# ---------------------------------------------------------------------- where batches come from
@dataclasses.dataclass
class _Ahead:
    """rollout.overlap's next batch while it is being prepared."""
    step: int
    data_state: dict  # the prompt pipeline's position before its prompts
    samples: SampledRollouts
    prepared: concurrent.futures.Future  # of a PreparedBatch


class RolloutFeed:
    """Where each step's batch comes from.

    By default in series: the step samples with the current policy, then runs its host half.
    With `rollout.overlap` (one step off-policy, as verl's and TRL's async modes): `next(t)` hands
    over batch t, sampled by the parameters update t-1 started from and prepared in a thread while
    the device ran update t-1; then it dispatches the sampling of batch t+1 with the current
    parameters (before update t donates them) and prepares it in the thread while update t runs.
    Step 0 (and a run resumed without pending rollouts) samples on-policy. The update's PPO ratio
    uses the sampler's behaviour log-probs (`TrainBatch.behaviour`).

    A checkpoint holds the pending batch's sampler outputs (`PENDING_ROLLOUTS`) and the data
    position before its prompts; a resumed run prepares them again (decoding, verification and
    pairs are deterministic), so it continues as the uninterrupted run does.
    """

    def __init__(self, setup: RolloutSetup, pipeline, tools: HostTools,
                 stack: contextlib.ExitStack):
        self.setup, self.pipeline, self.tools = setup, pipeline, tools
        self.overlap = setup.settings.overlap
        self.ahead: _Ahead | None = None
        self.executor = None
        if self.overlap:
            self.executor = stack.enter_context(concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="coop-rollouts"))

    def next(self, step: int, state) -> PreparedBatch:
        """Batch `step`; `state`: the train state the step updates (its policy samples)."""
        s = self.setup.settings
        if not self.overlap:
            if s.dynamic_sampling:
                return collect_informative(self.setup, state, step, self.pipeline, self.tools)
            return collect(self.setup, state, step, self.pipeline.next_batch(), self.tools)
        if self.ahead is None:
            self._prepare_ahead(step, state.policy_weights())
        t0 = time.perf_counter()
        prepared = self.ahead.prepared.result()
        prepared.metrics["time/rollout_wait"] = time.perf_counter() - t0
        self.ahead = None
        if step + 1 < s.steps:
            self._prepare_ahead(step + 1, state.policy_weights())
        return prepared

    def _prepare_ahead(self, step: int, params, samples: SampledRollouts | None = None) -> None:
        data_state = self.pipeline.state()
        records = self.pipeline.next_batch()
        if samples is None:
            samples = sample_rollouts(self.setup, params, None, records,
                                      rollout_key(self.setup.settings.seed, step))
        prepared = self.executor.submit(prepare_batch, self.setup, step, records, samples,
                                        self.tools)
        self.ahead = _Ahead(step, data_state, samples, prepared)

    def checkpoint(self) -> tuple[dict, dict]:
        """(meta entries, host items) that let a resumed run continue from here."""
        if self.ahead is None:
            return {"data": self.pipeline.state(), PENDING_ROLLOUTS: False}, {}
        views = [{k: v for k, v in out._asdict().items() if v is not None}
                 for out in self.ahead.samples.views]
        return ({"data": self.ahead.data_state, PENDING_ROLLOUTS: True},
                {PENDING_ROLLOUTS: {"views": views}})

    def resume(self, step: int, meta: dict, ckpt) -> None:
        """After the pipeline's restore: prepare the checkpoint's pending batch of `step` again."""
        if self.overlap and meta.get(PENDING_ROLLOUTS) and step < self.setup.settings.steps:
            saved = ckpt.load_rows_item(PENDING_ROLLOUTS)
            self._prepare_ahead(step, None, SampledRollouts(
                [sampling.Rollouts(**v) for v in saved["views"]]))
