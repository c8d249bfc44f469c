"""Evaluation: policy accuracy (greedy, avg@k, pass@k) and reward-model accuracy / ROC AUC, each
with bootstrap confidence intervals; `coop-eval` and `coop-report` command lines. Generation,
RM scoring and the statistics live below evaluation (`coop_jax.sampling`, `coop_jax.rm.scoring`,
`coop_jax.stats`), so training uses them without importing this package."""
from coop_jax.eval.evaluate import evaluate_policy, score_policy
from coop_jax.hf.tokenizer import stop_token_ids
from coop_jax.rm.scoring import evaluate_reward_model, score_triples
from coop_jax.sampling import generate_completions
from coop_jax.stats import average_ranks, bootstrap_ci, mean_ci, pass_at_k, roc_auc
from coop_jax.verify.grouped import verify_grouped

__all__ = [
    "average_ranks", "bootstrap_ci", "evaluate_policy", "evaluate_reward_model",
    "generate_completions", "mean_ci", "pass_at_k", "roc_auc", "score_policy", "score_triples",
    "stop_token_ids", "verify_grouped",
]
