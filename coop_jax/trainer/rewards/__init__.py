"""Reward types: one module per `reward.type`, each registering its host half and its device half
once (`register_reward(name, device=...)`).

    rule            the rule verifier's labels                         (rule.py)
    static_rm       sigmoid of a frozen RM's score, on device          (static_rm.py)
    cooper          the RM's reward, the RM co-trained in the step     (cooper.py)
    hybrid          rule strata, RM order inside them                  (hybrid.py)
    majority_vote   TTRL's group majority answer                       (majority_vote.py)
    corewarding_1   each view labelled by the other's majority         (corewarding_1.py)
    corewarding_2   labels from an EMA teacher's majority              (corewarding_2.py)
    random          a fair coin (calibration)                          (random_coin.py)

`source.py` says what a reward type is; `voting.py` holds the answer voting the label-free types
share. Adding a reward type is one module here with its `@register_reward(...)` function, imported
below, plus its test. Rows are prompt-major (row r = rollout r % G of prompt r // G). See
docs/ALGORITHMS.md.
"""
from coop_jax.trainer.rewards import (  # noqa: F401 - each module registers its reward type
    cooper, corewarding_1, corewarding_2, hybrid, majority_vote, random_coin, rule, static_rm)
from coop_jax.trainer.rewards.corewarding_2 import corewarding_decay, ema_teacher_update
from coop_jax.trainer.rewards.random_coin import random_rewards
from coop_jax.trainer.rewards.rule import rule_labels
from coop_jax.trainer.rewards.source import (REWARD_SOURCES, RULE_EXTRACTION, VOTE_EXTRACTION,
                                             RewardInputs, RewardSource, extraction_mode,
                                             register_reward, reward_source, rm_reward_types)
from coop_jax.trainer.rewards.validation import validate_config
from coop_jax.trainer.rewards.voting import (ANSWER_MATCHES, group_majority_labels,
                                             majority_answer, match_rewards, normalize_answer,
                                             pseudo_label_accuracy)

__all__ = ["ANSWER_MATCHES", "REWARD_SOURCES", "RULE_EXTRACTION", "VOTE_EXTRACTION",
           "RewardInputs", "RewardSource", "corewarding_decay", "ema_teacher_update",
           "extraction_mode", "group_majority_labels", "majority_answer", "match_rewards",
           "normalize_answer", "pseudo_label_accuracy", "random_rewards", "register_reward",
           "reward_source", "rm_reward_types", "rule_labels", "validate_config"]
