"""Evaluators declared in the config with their schedule (coop_jax.trainer.evaluators,
`evals.<name>.every`): the schedule, validation, and a new evaluator added as one registry entry
plus its entry in config.evals, run by the loop."""
import json
import os

import pytest

import ml_collections
from conftest import repo_config

from coop_jax import config as config_lib
from coop_jax.trainer import evaluators, loop, setup


@pytest.fixture
def counting():
    """A temporary evaluator `count` that records its calls."""
    calls = []

    @evaluators.register_evaluator("count", after_resume=False)
    def count(run):
        calls.append(run)
        return {"count/calls": len(calls)}
    yield calls
    evaluators.EVALUATORS.unregister("count")


def _context(c) -> evaluators.EvalContext:
    """A context of config `c`'s evaluation settings and no models."""
    settings = evaluators.EvalSettings.from_config(config_lib.typed(c))
    return evaluators.EvalContext(settings, None, None, None, [], None, {})


def _only(**every) -> ml_collections.ConfigDict:
    """An `evals` section declaring just these evaluators."""
    return ml_collections.ConfigDict({name: {"every": n} for name, n in every.items()})


def test_each_declared_evaluator_runs_at_start_every_n_steps_and_after_the_last(counting):
    c = repo_config("tiny_test")
    c.evals = _only(count=3)
    run = _context(c)
    due = [done for done in range(8) if evaluators.run_due(run, done, last=done == 7)]
    assert due == [0, 3, 6, 7] and len(counting) == 4
    c.evals.count.every = 0  # no cadence: before RL and after the last step only
    run = _context(c)
    assert [d for d in range(8) if evaluators.run_due(run, d, last=d == 7)] == [0, 7]
    c.evals.count.every = -1  # off
    assert evaluators.run_due(_context(c), 0, last=False) == {}
    c.evals = _only()
    assert evaluators.run_due(_context(c), 0, last=False) == {}


def test_the_default_declares_the_three_evaluations_with_their_schedules():
    c = repo_config("tiny_test")
    c.evals.update(policy=dict(every=5), rm_heldout=dict(every=7), probes=dict(every=0))
    schedule = evaluators.EvalSettings.from_config(config_lib.typed(c)).schedule
    assert [(e.name, every) for e, every in evaluators.scheduled(schedule)] == [
        ("policy", 5), ("rm_heldout", 7), ("probes", 0)]


def test_the_old_schedule_fields_still_set_the_schedules(caplog):
    c = repo_config("tiny_test")
    c.train.eval_every, c.cooper.heldout_every, c.probes.every = 5, 7, 2
    with caplog.at_level("WARNING", logger="coop_jax"):
        schedule = evaluators.EvalSettings.from_config(config_lib.typed(c)).schedule
    assert schedule == (("policy", 5), ("rm_heldout", 7), ("probes", 2))
    assert [r.message for r in caplog.records] == [
        f"config.{old} is deprecated: it is now config.{new} (the old name works until the "
        "next release)" for old, new in (("cooper.heldout_every", "evals.rm_heldout.every"),
                                         ("train.eval_every", "evals.policy.every"),
                                         ("probes.every", "evals.probes.every"))]


@pytest.mark.parametrize("evals, message", [
    (_only(policy=1, nope=2), r"config\.evals\.nope: no such evaluator"),
    (_only(policy=-2), r"config\.evals\.policy\.every must be >= -1, got -2")])
def test_an_unknown_evaluator_or_a_bad_schedule_is_one_line_naming_the_field(evals, message):
    c = repo_config("tiny_test")
    c.evals = evals
    with pytest.raises(ValueError, match=message):
        setup.validate_config(c, device_count=8)


def test_a_new_evaluator_is_a_registry_entry_and_a_config_line(counting, tmp_path):
    """The loop runs what config.evals lists, and only that: `count` at step 0, step 2 (its
    cadence) and the last step; without `policy` no held-out accuracy is computed."""
    c = repo_config("tiny_test")
    c.evals, c.train.steps = _only(count=2), 3
    loop.train(c, str(tmp_path))
    with open(os.path.join(tmp_path, "metrics.jsonl")) as fh:
        rows = [json.loads(line) for line in fh]
    assert [(r["step"], r["count/calls"]) for r in rows if "count/calls" in r] == [
        (0, 1), (2, 2), (3, 3)]
    assert not any("eval/greedy_accuracy" in r for r in rows)
    assert counting[-1].policy_cfg is not None and len(counting[-1].heldout) > 0
