"""The host's rollout metrics (`trainer.rollouts`), by hand: the sampler's padding waste, the
all-wrong groups, the RM's agreement with the rule labels."""
import numpy as np
import pytest


def test_padding_waste_by_hand():
    """Lengths 2, 4, 4, 8: the static batch decodes 8 steps for each of 4 rows (32 row-steps),
    18 of them useful: 14/32 = 0.4375 wasted; equal lengths waste nothing."""
    import jax.numpy as jnp
    from coop_jax.trainer.rollouts import padding_waste
    assert float(padding_waste(jnp.array([2, 4, 4, 8]))) == pytest.approx(0.4375)
    assert float(padding_waste(jnp.array([5, 5]))) == 0.0


def test_all_wrong_group_metrics_by_hand():
    """G = 2, three groups: labels (1, 0), (0, 0), (0, 0): two of three groups hold no correct
    rollout; their advantages (0.5, -0.5) and (1, -3) have mean |advantage| (0.5+0.5+1+3)/4."""
    from coop_jax.trainer.rollouts import all_wrong_group_metrics
    labels = np.array([1, 0, 0, 0, 0, 0], np.float32)
    m = all_wrong_group_metrics(labels, np.array([9.0, -9.0, 0.5, -0.5, 1.0, -3.0]), 2)
    assert m == {"all_wrong_group_fraction": pytest.approx(2 / 3),
                 "all_wrong_advantage_abs_mean": pytest.approx(1.25)}
    none = all_wrong_group_metrics(np.ones(4), np.zeros(4), 2)
    assert none == {"all_wrong_group_fraction": 0.0, "all_wrong_advantage_abs_mean": None}


def test_rm_label_metrics_by_hand():
    """Two prompts, G = 3. Group 0: correct rollouts scored 2 and -1, a wrong one 0.5: pairs
    (2 > 0.5) yes, (-1 > 0.5) no. Group 1: correct 1, wrong 1 and -3: a tie (1/2) and a win.
    Pairwise: (1 + 0 + 0.5 + 1) / 4 = 0.625. Pointwise (score > 0 as correct): rows
    [2+, -1+, 0.5-, 1+, 1-, -3-] -> right on 2, 1, -3: 3/6. AUC over all 3 correct x 3 wrong:
    2 beats all 3; -1 beats -3 only; 1 beats 0.5 and -3, ties 1: (3 + 1 + 2.5) / 9."""
    from coop_jax.trainer.rollouts import rm_label_metrics
    scores = np.array([2.0, -1.0, 0.5, 1.0, 1.0, -3.0])
    labels = np.array([1, 1, 0, 1, 0, 0], np.float32)
    m = rm_label_metrics(scores, labels, 3, "_after")
    assert m["rm_onpolicy_pair_accuracy_after"] == pytest.approx(0.625)
    assert m["rm_rule_agreement_after"] == pytest.approx(0.5)
    assert m["rm_onpolicy_auc_after"] == pytest.approx(6.5 / 9)
    # balanced: right answers accepted 2 of 3 (2, 1; not -1), wrong ones rejected 1 of 3 (-3)
    assert m["rm_balanced_accuracy_after"] == pytest.approx((2 / 3 + 1 / 3) / 2)
    none = rm_label_metrics(scores, np.ones(6), 3)  # no wrong rollout: no pair to rank
    assert none["rm_onpolicy_pair_accuracy"] is None and np.isnan(none["rm_onpolicy_auc"])
    assert none["rm_balanced_accuracy"] is None
