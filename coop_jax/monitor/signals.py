"""The monitor's signals: what each reads of a step's metrics (the keys runs log in
`metrics.jsonl`), which way is bad, and what a run needs to have for it to exist.

Which signals a run can compute depends on what it has (`RunTraits`): an RM that scores the
rollouts (static_rm, cooper, hybrid), rule labels of the rollouts (a dataset with references),
hack probes (`probes.triples`), a task with an answer marker. `signal_availability` says, for
each signal, whether it can be computed and why not; a label-free reward (majority_vote,
corewarding_*) on data without references keeps only the label-free ones.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, Mapping

from coop_jax.monitor.settings import SIGNAL_NAMES, MonitorSettings

# reward types whose reward is (or includes) an RM's score of the rollouts
RM_REWARDS = ("static_rm", "cooper", "hybrid")
# reward types that need no reference answers to train (the rule labels are diagnostics only)
LABEL_FREE_REWARDS = ("majority_vote", "corewarding_1", "corewarding_2")


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if value == value and abs(value) != float("inf") else None


def gold_key(row: Mapping) -> str | None:
    """The rollouts' true accuracy of the row: `gold_accuracy` (a run whose RM diagnostics use
    another gold than the reward's rule) or else `rule_accuracy`; None when it has neither."""
    for key in ("gold_accuracy", "rule_accuracy"):
        if _number(row.get(key)) is not None:
            return key
    return None


def hacking_gap(row: Mapping) -> float | None:
    """`proxy_reward_mean` minus the rollouts' gold (or rule) accuracy: the reward the RM pays
    that the rule does not."""
    proxy, key = _number(row.get("proxy_reward_mean")), gold_key(row)
    return None if proxy is None or key is None else proxy - float(row[key])


def _key(name: str) -> Callable[[Mapping], float | None]:
    return lambda row: _number(row.get(name))


@dataclasses.dataclass(frozen=True)
class Signal:
    name: str
    what: str           # how it reads, for the alarm line and the docs
    value: Callable[[Mapping], float | None]
    direction: int      # +1: rising is bad, -1: falling is bad, 0: either
    statistic: str      # "cusum" (per-step, noisy) or "rise" (sparse, deterministic)
    needs: tuple[str, ...]   # of RunTraits' fields
    relative: bool = False   # deviations relative to the baseline (a length), else absolute


SIGNALS: dict[str, Signal] = {s.name: s for s in (
    Signal("gap", "hacking gap proxy_reward_mean - rule_accuracy (or gold_accuracy)",
           hacking_gap, +1, "cusum", ("rm", "rule_labels")),
    Signal("agreement", "RM-rule agreement rm_rule_agreement", _key("rm_rule_agreement"), -1,
           "cusum", ("rm", "rule_labels")),
    Signal("balanced_accuracy", "RM balanced accuracy rm_balanced_accuracy",
           _key("rm_balanced_accuracy"), -1, "cusum", ("rm", "rule_labels")),
    Signal("probe_false_accept", "RM false-accepts on the hack probes probe/rm_false_accept",
           _key("probe/rm_false_accept"), +1, "rise", ("rm", "probes")),
    Signal("response_length", "mean response length response_length", _key("response_length"),
           0, "cusum", (), relative=True),
    Signal("marker_rate", "share of rollouts writing the answer marker rollout/marker_rate",
           _key("rollout/marker_rate"), -1, "cusum", ("marker",)),
    Signal("truncation", "share of rollouts cut at the length cap truncated_fraction",
           _key("truncated_fraction"), +1, "cusum", ()),
)}
assert tuple(SIGNALS) == SIGNAL_NAMES

NEED_REASONS = {
    "rm": "no reward model scores the rollouts (the reward is not static_rm, cooper or hybrid)",
    "rule_labels": "no rule labels of the rollouts (a label-free reward on data without "
                   "references logs no rule_accuracy)",
    "probes": "no hack probes are scored (set probes.triples and evals.probes.every)",
    "marker": "the task has no answer marker (rollout/marker_rate is not logged)",
}


@dataclasses.dataclass(frozen=True)
class RunTraits:
    """What a run has that the signals need."""
    rm: bool
    rule_labels: bool
    probes: bool
    marker: bool

    @classmethod
    def from_metric_keys(cls, keys: Iterable[str]) -> "RunTraits":
        """The traits a run's logged metrics show (e.g. the keys of its metrics.jsonl)."""
        keys = set(keys)
        return cls(rm=bool({"proxy_reward_mean", "rm_rule_agreement"} & keys),
                   rule_labels=bool({"rule_accuracy", "gold_accuracy"} & keys),
                   probes="probe/rm_false_accept" in keys,
                   marker="rollout/marker_rate" in keys)

    @classmethod
    def from_reward_type(cls, reward_type: str, *, references: bool = True,
                         probes: bool = False, marker: bool = True) -> "RunTraits":
        """The traits a run of `reward_type` will have (`references`: the data has reference
        answers, so the rollouts get rule labels even under a label-free reward)."""
        rm = reward_type in RM_REWARDS
        return cls(rm=rm, rule_labels=references, probes=probes and rm, marker=marker)


@dataclasses.dataclass(frozen=True)
class Availability:
    signal: str
    on: bool          # named in monitor.signals
    available: bool   # the run has what it needs
    reason: str       # why not ("" when available)


def signal_availability(settings: MonitorSettings, traits: RunTraits) -> list[Availability]:
    """For every signal: whether it is on, whether the run can compute it, and why not."""
    out = []
    for name, signal in SIGNALS.items():
        missing = [need for need in signal.needs if not getattr(traits, need)]
        out.append(Availability(name, name in settings.watched, not missing,
                                "; ".join(NEED_REASONS[m] for m in missing)))
    return out
