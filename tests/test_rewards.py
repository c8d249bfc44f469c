"""Host-side rewards: majority vote, exact-string matching, group labels, rule labels."""
import numpy as np
import pytest

from coop_jax import config, rewards


@pytest.mark.parametrize("answers,expected", [
    (["3", "4", "4"], "4"),
    (["3", "4", "4", "3"], "3"),            # tie: the answer seen first
    (["4", "3", "3", "4"], "4"),
    ([None, "5", None], "5"),               # empty answers do not vote
    ([None, "", "  "], None),               # nothing to vote on
    ([], None),
    ([" 4", "4 ", "5"], "4"),               # whitespace is not part of the answer
    (["1/2", "0.5", "0.5"], "0.5"),         # exact strings: no maths equivalence
    (["1/2", "0.5"], "1/2"),
    (["\\frac{1}{2}", "\\frac {1}{2}", "0.5"], "\\frac{1}{2}"),
])
def test_majority_answer(answers, expected):
    assert rewards.majority_answer(answers) == expected


def test_normalize_answer():
    assert rewards.normalize_answer(None) is None
    assert rewards.normalize_answer("   ") is None
    assert rewards.normalize_answer(" 1 000 ") == "1000"


def test_match_rewards_exact_string():
    out = rewards.match_rewards(["0.5", "1/2", " 7 ", None, "7", "x"],
                                ["1/2", "1/2", "7", "7", None, "x"])
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [0, 1, 1, 0, 0, 1])


def test_group_majority_labels_and_rewards():
    answers = ["3", "3", "4", None,   # group 0 -> "3"
               None, None, None, None,  # group 1 -> no label
               "1/2", "0.5", "0.5", "1/2"]  # group 2: tie -> "1/2"
    labels = rewards.group_majority_labels(answers, 4)
    assert labels == ["3", None, "1/2"]
    per_row = [lab for lab in labels for _ in range(4)]
    np.testing.assert_array_equal(rewards.match_rewards(answers, per_row),
                                  [1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1])
    with pytest.raises(ValueError, match="groups of 4"):
        rewards.group_majority_labels(answers[:5], 4)


def test_rule_labels_from_the_process_pool():
    from coop_jax.verify import RuleVerifier
    with RuleVerifier(num_workers=1, timeout_s=5.0) as verifier:
        labels, extracted, timeouts = rewards.rule_labels(
            verifier, ["7", "7", "\\frac{1}{2}", "3"],
            ["#### 7", "#### 8", "so \\boxed{0.5}", "no answer"])
    np.testing.assert_array_equal(labels, [1, 0, 1, 0])
    assert labels.dtype == np.float32
    assert extracted == ["7", "8", "0.5", None] and timeouts == 0


def test_every_reward_type_has_a_source():
    assert set(rewards.REWARD_SOURCE) == set(config.REWARD_TYPES)
    assert set(rewards.REWARD_SOURCE.values()) <= {"batch", "rm", "hybrid"}
    assert {k for k, v in rewards.REWARD_SOURCE.items() if v != "batch"} == set(
        config.RM_REWARD_TYPES)
