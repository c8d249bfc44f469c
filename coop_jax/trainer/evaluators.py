"""The evaluations of a run, declared in the config and run by the loop.

`config.evals` declares them with their schedule, the big_vision way: `evals.<name>.every`
(a name of EVALUATORS). The loop runs every declared evaluator, in the order they were
registered, on the policy before RL (step 0), every `every` steps (0: never in between; -1: not
at all) and after the last step. A new evaluation is one `@register_evaluator` function here and
its entry in the config (`c.evals.my_eval = dict(every=10)`):

    @register_evaluator("my_eval")
    def my_eval(run: EvalContext) -> dict:
        return {"my_eval/score": ...}

An evaluator reads what it needs from `EvalContext` (the run's policy and RM as they are now,
the held-out records, the evaluation's verifiers, the `EvalSettings` the entry point read from the
config once) and returns its metrics.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from coop_jax.eval.evaluate import evaluate_policy
from coop_jax.registry import Registry, first_doc_line
from coop_jax.rm.input import RMInputFormat, read_triples
from coop_jax.rm.scoring import evaluate_reward_model
from coop_jax.sampling.engine import DEFAULT_SLOT_HALVINGS


@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """What the evaluators read of the config, built once by the entry point (`from_config`):
    the schedule (each declared evaluator's name and cadence, in registry order), the
    policy evaluation's sampling (`eval`, with the rollouts' prompt and length), the RM's held-out
    triples and input format. The policy evaluation samples with the rollouts' engine
    (`rollout.engine`, `rollout.slots`, `rollout.slot_halvings`)."""
    schedule: tuple[tuple[str, int], ...]
    prompt_template: str
    chat_template: bool
    max_prompt_len: int
    max_new_tokens: int
    k: int
    temperature: float
    top_p: float
    headline: str           # "greedy" or "sampled"
    batch_size: int
    seed: int
    rm_heldout_triples: str = ""
    rm_format: RMInputFormat | None = None
    engine: str = "static"
    slots: int = 0
    slot_halvings: int = DEFAULT_SLOT_HALVINGS

    @classmethod
    def from_config(cls, config) -> "EvalSettings":
        e, d = config.eval, config.data
        return cls(schedule(config.evals), d.prompt_template, bool(d.chat_template),
                   d.max_prompt_len, config.rollout.max_new_tokens, e.k, e.temperature,
                   e.top_p, e.headline, e.batch_size, config.seed, config.rm.heldout_triples,
                   RMInputFormat.from_config(config) if config.rm.heldout_triples else None,
                   config.rollout.engine, int(config.rollout.slots),
                   int(config.rollout.slot_halvings))


@dataclasses.dataclass(frozen=True)
class EvalContext:
    """What an evaluator sees of the run. `policy()` / `rm()` return the current weights."""
    settings: EvalSettings
    policy: Callable[[], Any]
    policy_cfg: Any
    tokenizer: Any
    heldout: list
    verifier: Any          # the evaluation's (lenient) verifier
    strict: dict           # further verifiers by name (a dataset's strict gold)
    rm: Callable[[], Any] | None = None   # the RM's weights (None: the run has no RM)
    rm_model: Any = None   # rm.load.RewardModel
    probes: Callable[[], dict] | None = None


@dataclasses.dataclass(frozen=True)
class Evaluator:
    """An evaluator a config declares in `evals`: `run(context) -> metrics`; `after_resume`: also
    run when a resumed run had already finished its steps (for the summary's final values)."""
    name: str
    run: Callable[[EvalContext], dict]
    after_resume: bool = True


EVALUATORS: Registry[Evaluator] = Registry("evals")


def register_evaluator(name: str, *, after_resume: bool = True):
    """Decorator: register `fn(context) -> metrics` as evaluator `name` (scheduled by the
    config's `evals.<name>.every`)."""
    def register(fn):
        EVALUATORS.register(name, Evaluator(name, fn, after_resume), doc=first_doc_line(fn))
        return fn
    return register


def schedule(evals) -> tuple[tuple[str, int], ...]:
    """(name, every) of the evaluators the config's `evals` section declares and runs (every
    >= 0), in registry order."""
    declared = {name: getattr(evals, name).every for name in evals.names()}
    return tuple((name, declared[name]) for name in EVALUATORS
                 if name in declared and declared[name] >= 0)


def validate(evals) -> None:
    """Raise ValueError naming config.evals.<name> when the section declares an evaluator that
    is not registered."""
    for name in evals.names():
        if name not in EVALUATORS:
            raise ValueError(f"config.evals.{name}: no such evaluator (one of "
                             f"{list(EVALUATORS)})")


def scheduled(schedule: Sequence[tuple[str, int]]) -> list[tuple[Evaluator, int]]:
    """(evaluator, its cadence in steps) of every (name, cadence) of `schedule`, in order."""
    return [(EVALUATORS[name], every) for name, every in schedule]


def due(done: int, every: int, last: bool) -> bool:
    """Whether an evaluation of cadence `every` runs after `done` steps (always after the
    last)."""
    return last or bool(every and done % every == 0)


def run_due(context: EvalContext, done: int, last: bool) -> dict:
    """The metrics of every listed evaluator due after `done` steps (done=0: all of them)."""
    metrics: dict = {}
    for evaluator, every in scheduled(context.settings.schedule):
        if done == 0 or due(done, every, last):
            metrics.update(evaluator.run(context))
    return metrics


def run_after_resume(context: EvalContext) -> dict:
    """The final metrics of a resumed run that had already finished its steps."""
    metrics: dict = {}
    for evaluator, _ in scheduled(context.settings.schedule):
        if evaluator.after_resume:
            metrics.update(evaluator.run(context))
    return metrics


# ---------------------------------------------------------------------- the evaluators
@register_evaluator("policy")
def policy_accuracy(run: EvalContext) -> dict:
    """The policy's greedy accuracy, avg@k (eval.k samples) and the headline one of the two on
    the held-out split (lenient; a dataset's strict gold beside it, "..._strict")."""
    s = run.settings
    if not run.heldout:
        return {}
    report, _ = evaluate_policy(
        run.policy(), run.policy_cfg, run.tokenizer, run.heldout,
        template=s.prompt_template, chat=s.chat_template, verifier=run.verifier, k=s.k,
        temperature=s.temperature, top_p=s.top_p, greedy=True, max_prompt_len=s.max_prompt_len,
        max_new_tokens=s.max_new_tokens, batch_size=s.batch_size, seed=s.seed, also=run.strict,
        engine=s.engine, slots=s.slots, slot_halvings=s.slot_halvings)
    metrics = {"eval/greedy_accuracy": report["greedy_accuracy"]["mean"],
               "eval/sampled_accuracy": report["avg_at_k"]["mean"]}
    for name in run.strict:
        metrics[f"eval/greedy_accuracy_{name}"] = report[name]["greedy_accuracy"]["mean"]
        metrics[f"eval/sampled_accuracy_{name}"] = report[name]["avg_at_k"]["mean"]
    metrics["eval/headline_accuracy"] = metrics[
        "eval/greedy_accuracy" if s.headline == "greedy" else "eval/sampled_accuracy"]
    return metrics


@register_evaluator("rm_heldout")
def rm_heldout_accuracy(run: EvalContext) -> dict:
    """The RM's accuracy on the held-out triples of `rm.heldout_triples` (when set)."""
    path = run.settings.rm_heldout_triples
    if run.rm is None or not path:
        return {}
    report, _ = evaluate_reward_model(run.rm(), run.rm_model.config, run.rm_model.tokenizer,
                                      read_triples(path), fmt=run.settings.rm_format,
                                      batch_size=64)
    return {"rm_heldout_accuracy": report["accuracy"]["mean"]}


@register_evaluator("probes", after_resume=False)
def hack_probes(run: EvalContext) -> dict:
    """The hack probes' RM false-accept rate and policy log-likelihood (`probes.triples`)."""
    return run.probes() if run.probes is not None else {}
