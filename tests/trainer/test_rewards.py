"""Host-side rewards: majority vote, exact-string matching, group labels, rule labels, the
Co-rewarding-II EMA schedule."""
import math

import numpy as np
import pytest

from coop_jax import config
from coop_jax.trainer import rewards, setup
from coop_jax.registry import Options


@pytest.mark.parametrize("answers,expected", [
    (["3", "4", "4"], "4"),
    (["3", "4", "4", "3"], "3"),            # tie: the answer seen first
    (["4", "3", "3", "4"], "4"),
    ([None, "5", None], "5"),               # empty answers do not vote
    ([None, "", "  "], None),               # nothing to vote on
    ([], None),
    ([" 4", "4 ", "5"], "4"),               # the ends' whitespace is not part of the answer
    (["1/2", "0.5", "0.5"], "0.5"),         # exact strings: no maths equivalence
    (["1/2", "0.5"], "1/2"),
    # exact (the references): inner whitespace counts, so the two fractions are two answers and
    # the tie goes to the first
    (["\\frac{1}{2}", "\\frac {1}{2}", "0.5", "0.5"], "0.5"),
    (["\\frac{1}{2}", "0.5", "\\frac {1}{2}"], "\\frac{1}{2}"),
])
def test_majority_answer(answers, expected):
    assert rewards.majority_answer(answers) == expected


def test_majority_answer_without_whitespace_is_an_option():
    answers = ["\\frac{1}{2}", "\\frac {1}{2}", "0.5", "0.5"]
    assert rewards.majority_answer(answers, "no_whitespace") == "\\frac{1}{2}"
    assert rewards.majority_answer(["1 000", "1000", "7"], "no_whitespace") == "1000"
    assert rewards.majority_answer(["1 000", "1000", "7"]) == "1 000"  # exact: a three-way tie


def test_normalize_answer():
    assert rewards.normalize_answer(None) is None
    assert rewards.normalize_answer("   ") is None
    assert rewards.normalize_answer(" 1 000 ") == "1 000"
    assert rewards.normalize_answer(" 1 000 ", "no_whitespace") == "1000"
    with pytest.raises(ValueError, match="reward.vote_match='nope' is not one of"):
        rewards.normalize_answer("1", "nope")


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


_MODULES = {"random": "random_coin"}  # reward.type -> its module, where the names differ


def test_every_reward_type_is_registered_once_with_its_device_half():
    from coop_jax.trainer.step import HOST_REWARDS, DeviceReward
    devices = {}
    for name, source in rewards.REWARD_SOURCES.items():
        assert source.name == name and isinstance(source.device, DeviceReward)
        assert source.needs_rm == (name in rewards.rm_reward_types())
        # each reward type's module holds its host function (and any device half it owns)
        assert source.host.__module__ == f"coop_jax.trainer.rewards.{_MODULES.get(name, name)}"
        devices[name] = source.device.name
    assert devices == {"rule": "batch", "static_rm": "rm", "cooper": "rm", "hybrid": "hybrid",
                       "majority_vote": "batch", "corewarding_1": "batch",
                       "corewarding_2": "batch", "random": "batch"}
    assert rewards.REWARD_SOURCES["rule"].device is HOST_REWARDS
    assert rewards.REWARD_SOURCES["cooper"].device is rewards.REWARD_SOURCES["static_rm"].device
    assert {n for n, s in rewards.REWARD_SOURCES.items() if s.trains_rm} == {"cooper"}
    assert rewards.REWARD_SOURCES["corewarding_1"].num_views == 2
    assert rewards.REWARD_SOURCES["corewarding_2"].before_step is rewards.ema_teacher_update
    with pytest.raises(ValueError, match="reward.type='nope' is not one of"):
        rewards.reward_source("nope")


def test_random_reward_is_a_seeded_fair_coin_unrelated_to_the_texts():
    records = [{"id": f"r{i}", "question": "q", "reference": "7"} for i in range(64)]
    source = rewards.REWARD_SOURCES["random"]
    assert not source.uses_rule_labels and not source.needs_rm

    def coin(texts, step=0, seed=0, recs=records):
        x = rewards.RewardInputs(recs, [texts], None, None, None, 2, None,
                                 Options.of(seed=seed), step)
        return source.host(x)[0][0]

    right, wrong = ["#### 7"] * 128, ["#### 8"] * 128
    r = coin(right)
    assert set(np.unique(r)) == {0.0, 1.0} and 0.35 < r.mean() < 0.65
    np.testing.assert_array_equal(r, coin(wrong))  # the completion does not matter
    np.testing.assert_array_equal(r, coin(right))  # a resumed step draws the same
    assert not np.array_equal(r, coin(right, step=1))
    assert not np.array_equal(r, coin(right, seed=1))
    assert not np.array_equal(r, coin(right, recs=records[::-1]))  # a refill's prompts


def _inputs(views, labels=None, extracted=None, teacher=None, G=2, match="exact"):
    records = [{"question": "q1", "reference": "7"}, {"question": "q2", "reference": "3"}]
    return rewards.RewardInputs(records, views, labels, extracted, teacher, G, _Extractor(),
                                Options.of(match=match))


class _Extractor:
    def extract_batch(self, texts):
        return [t.split("#### ")[-1] if "####" in t else None for t in texts]


def test_host_rewards_of_the_label_free_sources():
    views = [["#### 7", "#### 8", "#### 3", "#### 3"]]
    extracted = _Extractor().extract_batch(views[0])
    labels = np.array([1, 0, 1, 1], np.float32)
    [r], m = rewards.REWARD_SOURCES["rule"].host(_inputs(views, labels, extracted))
    np.testing.assert_array_equal(r, labels)
    # majority vote: group 0 ties -> "7" (seen first), group 1 -> "3"
    [r], m = rewards.REWARD_SOURCES["majority_vote"].host(_inputs(views, labels, extracted))
    np.testing.assert_array_equal(r, [1, 0, 1, 1])
    assert m["pseudo_label_accuracy"] == 1.0
    # Co-rewarding-II: the teacher's majority labels the student's rollouts
    teacher = ["#### 8", "#### 8", "#### 4", "#### 3"]
    [r], m = rewards.REWARD_SOURCES["corewarding_2"].host(
        _inputs(views, labels, extracted, teacher=teacher))
    np.testing.assert_array_equal(r, [0, 1, 0, 0])
    assert m["pseudo_label_accuracy"] == 0.0
    # Co-rewarding-I: each view is labelled by the other's majority
    rephrased = ["#### 8", "#### 8", "#### 3", "#### 9"]
    r1, r2 = rewards.REWARD_SOURCES["corewarding_1"].host(
        _inputs([views[0], rephrased], labels, extracted))[0]
    np.testing.assert_array_equal(r1, [0, 1, 1, 1])
    np.testing.assert_array_equal(r2, [0, 0, 1, 0])
    [r], _ = rewards.REWARD_SOURCES["static_rm"].host(_inputs(views))
    np.testing.assert_array_equal(r, np.zeros(4))


def test_ema_teacher_update_hook():
    """The hook reads its decay from the reward type's declared options (corewarding.*, and
    train.steps when decay_steps is 0)."""
    import jax.numpy as jnp

    from coop_jax.optim import ModelState
    from coop_jax.trainer.step import TrainState

    c = config.base_config()
    c.reward.type = "corewarding_2"
    c.corewarding.update(a_start=0.5, a_end=0.1, decay_steps=0)
    c.train.steps = 4
    options = rewards.REWARD_SOURCES.options("corewarding_2", c)
    assert (options["a_start"], options["a_end"], options["steps"]) == (0.5, 0.1, 4)
    state = TrainState(jnp.zeros((), jnp.int32), ModelState({"w": jnp.ones(3)}, None),
                       ref_params={"w": jnp.zeros(3)})
    new, metrics = rewards.ema_teacher_update(state, 0, options)
    assert metrics == {"teacher_decay": 0.5}
    np.testing.assert_allclose(new.ref_params["w"], 0.5)
    np.testing.assert_allclose(new.policy.params["w"], 1.0)


def test_extraction_defaults_follow_the_references():
    c = config.base_config()
    assert c.verifier.extraction == "auto"
    expected = {("corewarding_1", "gsm8k"): "strict_boxed", ("corewarding_2", "math"): "strict_boxed",
                ("majority_vote", "gsm8k"): "strict_boxed", ("rule", "gsm8k"): "strict_hash",
                ("cooper", "gsm8k"): "strict_hash", ("cooper", "math"): "lenient",
                ("corewarding_1", "synthetic"): "lenient", ("rule", "synthetic"): "lenient"}
    for (reward_type, dataset), mode in expected.items():
        c.reward.type, c.data.dataset = reward_type, dataset
        assert setup.run_extraction_mode(c) == mode, (reward_type, dataset)
    c.verifier.extraction = "lenient"   # an explicit mode wins
    assert setup.run_extraction_mode(c) == "lenient"
    for mode in config.EXTRACTION_CHOICES[1:]:
        c.verifier.extraction = mode
        config.validate(c)
    c.verifier.extraction = "boxed"
    with pytest.raises(ValueError, match="verifier.extraction must be one of"):
        config.validate(c)


def test_strict_boxed_votes_give_unboxed_rollouts_zero():
    from coop_jax.verify import RuleVerifier
    views = [["\\boxed{7}", "#### 7", "the answer is 3", "\\boxed{3}"]]
    with RuleVerifier(num_workers=1, timeout_s=5.0, extraction="strict_boxed") as verifier:
        extracted = verifier.extract_batch(views[0])
        x = rewards.RewardInputs([{"question": "q", "reference": "7"}] * 2, views, None,
                                 extracted, None, 2, verifier, Options.of(match="exact"))
        [r], _ = rewards.REWARD_SOURCES["majority_vote"].host(x)
    assert extracted == ["7", None, None, "3"]
    np.testing.assert_array_equal(r, [1, 0, 0, 1])


def test_corewarding_decay_schedule():
    a0, a1, T = 0.01, 1e-5, 100
    assert rewards.corewarding_decay(0, a0, a1, T) == pytest.approx(a0)     # a_1 = a_start
    assert rewards.corewarding_decay(T, a0, a1, T) == pytest.approx(a1)     # a_{T+1} = a_end
    assert rewards.corewarding_decay(T // 2, a0, a1, T) == pytest.approx((a0 + a1) / 2)
    quarter = a1 + 0.5 * (a0 - a1) * (1 + math.cos(math.pi / 4))
    assert rewards.corewarding_decay(T // 4, a0, a1, T) == pytest.approx(quarter)
    assert rewards.corewarding_decay(5 * T, a0, a1, T) == pytest.approx(a1)  # clipped at T
    assert rewards.corewarding_decay(-3, a0, a1, T) == pytest.approx(a0)
    values = [rewards.corewarding_decay(k, a0, a1, T) for k in range(T + 1)]
    assert all(x >= y for x, y in zip(values, values[1:]))
