"""Evaluation: policy accuracy (greedy, avg@k, pass@k) and reward-model accuracy / ROC AUC, each
with bootstrap confidence intervals; `coop-eval` and `coop-report` command lines."""
from coop_jax.eval.evaluate import (
    evaluate_policy,
    evaluate_reward_model,
    generate_completions,
    score_policy,
    score_triples,
    stop_token_ids,
    verify_grouped,
)
from coop_jax.eval.stats import average_ranks, bootstrap_ci, mean_ci, pass_at_k, roc_auc

__all__ = [
    "average_ranks", "bootstrap_ci", "evaluate_policy", "evaluate_reward_model",
    "generate_completions", "mean_ci", "pass_at_k", "roc_auc", "score_policy", "score_triples",
    "stop_token_ids", "verify_grouped",
]
