"""Fields that moved, kept working for one release: a config (or a saved one, a committed run's
`config.to_dict()`) that sets an old name gets its value under the new name and one line saying
so. `upgrade` is the one map from old names to new, used by the entry points' conversion and by
whatever compares saved configs (projects.run_store)."""
from __future__ import annotations

import copy
import logging
from typing import Any

log = logging.getLogger("coop_jax")

# old dotted path -> new dotted path (0.1.x -> 0.2)
RENAMED = {
    "cooper.rm_checkpoint": "rm.checkpoint",
    "cooper.max_len": "rm.max_len",
    "cooper.heldout_triples": "rm.heldout_triples",
    "reward_model.question_format": "rm.question_format",
    "reward_model.truncation_side": "rm.truncation_side",
    "cooper.heldout_every": "evals.rm_heldout.every",
    "train.eval_every": "evals.policy.every",
    "probes.every": "evals.probes.every",
}
_UNSET = object()


def get(tree: dict, path: str, default: Any = _UNSET) -> Any:
    """The value at dotted `path` of a tree of dicts (`default` when absent)."""
    for part in path.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return default
        tree = tree[part]
    return tree


def _pop(tree: dict, path: str) -> Any:
    *parents, leaf = path.split(".")
    for part in parents:
        tree = tree.get(part) if isinstance(tree, dict) else None
    return tree.pop(leaf, None) if isinstance(tree, dict) else None


def _set(tree: dict, path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
    tree[leaf] = value


def _evals_from_string(tree: dict) -> None:
    """An old `evals` string ("policy,rm_heldout,probes") as the declared evaluators; their
    schedules come from the old schedule fields (`upgrade`)."""
    names = [n.strip() for n in tree["evals"].split(",") if n.strip()]
    tree["evals"] = {name: {"every": None} for name in names}


def upgrade(tree: dict, defaults: dict, announce: bool = True) -> dict:
    """A copy of the config tree `tree` (plain dicts) with every old name's value under its new
    name. A deprecated field that is unset (None) is dropped; one that is set moves, with a
    one-line deprecation message when `announce`, and wins over the new name (so an old
    `--config.cooper.max_len=` override still overrides a config file written with the new
    names). `defaults`: the schema's defaults, for new fields a saved config lacks."""
    tree = copy.deepcopy(tree)
    if isinstance(tree.get("evals"), str):
        _evals_from_string(tree)
    declared = set(tree["evals"]) if "evals" in tree else None  # None: saved before `evals`
    for old, new in RENAMED.items():
        value = _pop(tree, old)
        evaluator = new.split(".")[1] if new.startswith("evals.") else None
        if evaluator and declared is not None and evaluator not in declared:
            continue  # the old schedule of an evaluator the config does not run
        current = get(tree, new, None)  # None: absent, or declared by an old `evals` string
        if value is None:
            if current is None:
                _set(tree, new, get(defaults, new))
            continue
        if announce:
            log.warning("config.%s is deprecated: it is now config.%s (the old name works until "
                        "the next release)", old, new)
        _set(tree, new, value)
    return tree
