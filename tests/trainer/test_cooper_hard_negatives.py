"""Cooper's hard negatives (cooper.negative="rollout_hardest", cooper.pairs_per_group) and the
sham-Cooper control (cooper.pair_label_noise): the host's rollout indices, the step's choice by
the pre-update RM's scores (derived by hand), the swaps, and a tiny run with both."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import REPO, repo_config

from coop_jax import parallel
from coop_jax.rm import cooper
from coop_jax.trainer import loop, setup
from coop_jax.rm.step import RMInputs, resolve_pairs

ROOT = str(REPO)
G, K = 4, 2
# group 0: right, wrong, wrong, right; group 1: all wrong; group 2: wrong, right, right, right;
# group 3: right, wrong, wrong, wrong
LABELS = np.array([1, 0, 0, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0], np.float32)
# pre-update RM scores: group 0's wrong rows 1 and 2 tie; group 3's wrong rows rank 3 > 1 > 2
SCORES = np.array([0.5, 2.0, 2.0, -1.0, 0, 0, 0, 0, 3.0, 1.0, 1.0, 1.0, 0.0, -2.0, -3.0, 4.0],
                  np.float32)


def _rm_inputs() -> RMInputs:
    """Rollout r's RM input is the single token 100 + r, so a chosen row is visible."""
    rows = len(LABELS)
    return RMInputs(jnp.arange(100, 100 + rows, dtype=jnp.int32)[:, None],
                    jnp.ones((rows, 1), jnp.int32))


def test_the_host_sends_rollout_indices_k_per_group():
    pairs, stats = cooper.ranked_rollout_pairs(LABELS, G, K)
    assert pairs.pos_row.tolist() == [0, 0, 0, 0, 1, 1, 0, 0]   # each group's first right row
    assert pairs.neg_rank.tolist() == [0, 1] * 4
    # group 0 has 2 wrong rows (both ranks), group 1 no right one, group 2 one wrong row
    assert pairs.valid.tolist() == [1, 1, 0, 0, 1, 0, 1, 1]
    assert pairs.neg_choices[0].tolist() == [0, 1, 1, 0] and pairs.neg_choices[4].tolist() == [
        1, 0, 0, 0]
    assert stats == {"pairs/no_positive": 2, "pairs/no_negative": 1,
                     "pairs/negative_not_wrong": 0, "pairs/valid": 5,
                     "pairs/reference_positive": 0}


def test_the_step_picks_the_highest_scored_wrong_rollouts_ties_to_the_first():
    pairs, _ = cooper.ranked_rollout_pairs(LABELS, G, K)
    out = resolve_pairs(jax.tree_util.tree_map(jnp.asarray, pairs), _rm_inputs(),
                        jnp.asarray(SCORES), G)
    pos, neg = out.pos_tokens[:, 0] - 100, out.neg_tokens[:, 0] - 100
    valid = np.asarray(out.valid) > 0
    # group 0: rows 1 and 2 tie at 2.0 -> rank 0 is row 1, rank 1 row 2; group 2: row 8 only;
    # group 3: wrong rows 13 (-2), 14 (-3), 15 (4) -> 15, then 13
    assert np.asarray(neg)[valid].tolist() == [1, 2, 8, 15, 13]
    assert np.asarray(pos)[valid].tolist() == [0, 0, 9, 12, 12]
    assert out.neg_choices is None and out.pos_row is None


def test_swaps_exchange_the_pair_and_do_not_depend_on_the_split():
    swaps = cooper.label_swaps(8, 0.5, (0, 3, 1))
    halves = np.concatenate([cooper.label_swaps(4, 0.5, (0, 3, 1), first_pair=0),
                             cooper.label_swaps(4, 0.5, (0, 3, 1), first_pair=4)])
    assert swaps.tolist() == halves.tolist() and 0 < swaps.sum() < 8
    assert cooper.label_swaps(8, 0.0, (0, 3, 1)).sum() == 0
    assert cooper.label_swaps(8, 1.0, (0, 3, 1)).sum() == 8
    pairs, _ = cooper.ranked_rollout_pairs(LABELS, G, K)
    plain = resolve_pairs(jax.tree_util.tree_map(jnp.asarray, pairs), _rm_inputs(),
                          jnp.asarray(SCORES), G)
    swapped = resolve_pairs(jax.tree_util.tree_map(jnp.asarray, pairs.replace(swap=swaps)),
                            _rm_inputs(), jnp.asarray(SCORES), G)
    flip = swaps[:, None] > 0
    assert np.array_equal(swapped.pos_tokens, np.where(flip, plain.neg_tokens, plain.pos_tokens))
    assert np.array_equal(swapped.neg_tokens, np.where(flip, plain.pos_tokens, plain.neg_tokens))


def test_the_choice_is_the_same_on_a_sharded_mesh():
    """The step picks from global arrays: rows sharded over 8 devices give the same pairs."""
    pairs, _ = cooper.ranked_rollout_pairs(LABELS, G, K)
    pairs = jax.tree_util.tree_map(jnp.asarray, pairs)
    one = resolve_pairs(pairs, _rm_inputs(), jnp.asarray(SCORES), G)
    mesh = parallel.make_mesh((8, 1, 1))
    put = lambda tree: jax.tree_util.tree_map(
        lambda x: jax.device_put(x, parallel.host.row_sharding(mesh, x.shape)), tree)
    sharded = jax.jit(resolve_pairs, static_argnums=3)(put(pairs), put(_rm_inputs()),
                                                      put(jnp.asarray(SCORES)), G)
    for a, b in zip(jax.tree_util.tree_leaves(one), jax.tree_util.tree_leaves(sharded)):
        assert np.array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("field, value, message", [
    ("pairs_per_group", 2, "cooper.pairs_per_group=2 needs a negative ranked by the RM"),
    ("pairs_per_group", 0, "cooper.pairs_per_group must be an int >= 1"),
    ("pair_label_noise", 1.5, "cooper.pair_label_noise must be in"),
])
def test_inconsistent_options_are_one_line_naming_the_field(field, value, message):
    c = repo_config("tiny_test")
    c.reward.type, c.cooper.negative = "cooper", "rollout"
    c.cooper[field] = value
    with pytest.raises(ValueError, match=message):
        setup.validate_config(c, device_count=8)



def test_pairs_per_group_needs_room_only_where_pairs_are_formed():
    """Groups of 2 hold one pair: a Cooper run asking for 2 is refused naming the field; a rule
    run with the same cooper section (the demo's defaults) forms no pairs and is accepted."""
    c = repo_config("tiny_test")
    c.rollout.group_size = 2
    c.cooper.update(negative="rollout_hardest", pairs_per_group=2)
    setup.validate_config(c, device_count=8)  # reward.type is the rule's
    c.reward.type = "cooper"
    with pytest.raises(ValueError, match=r"cooper.pairs_per_group \(2\) must be below "
                                         r"rollout.group_size \(2\)"):
        setup.validate_config(c, device_count=8)

def test_a_tiny_run_with_hard_negatives_and_swapped_labels(tmp_path):
    """The tiny config with the reward-hacking plan's start policy (it answers about a third of
    these right, so groups hold both kinds): k = 2 pairs per group, half the labels swapped,
    all-wrong groups paired with their reference solution. The step's count of valid pairs is
    the host's, and the RM's inputs share their groups' prefix."""
    c = repo_config("tiny_test")
    c.model.hf_path = os.path.join(ROOT, "docs", "results", "reward_hacking", "plan", "inputs",
                                   "start_policy")
    c.data.max_prompt_len = 16
    c.rollout.update(group_size=4, prompts_per_step=4, max_new_tokens=40)
    c.reward.type, c.cooper.negative = "cooper", "rollout_hardest"
    c.cooper.update(pairs_per_group=2, pair_label_noise=0.5, reference_positive=True)
    loop.train(c, str(tmp_path))
    with open(os.path.join(tmp_path, "metrics.jsonl")) as fh:
        rows = [json.loads(line) for line in fh][1:]
    assert len(rows) == 2 and sum(r["pairs/valid"] for r in rows) > 0
    for r in rows:
        assert np.isfinite(r["rm_loss"]) and np.isfinite(r["rm_grad_norm"])
        assert r["pairs/valid"] <= 2 * c.rollout.prompts_per_step  # k = 2 per prompt
        assert r["rm_valid_pairs"] == r["pairs/valid"]
        assert 0 <= r["pairs/reference_positive"] <= r["pairs/valid"]
        # rl.share_prompt_prefix: the RM's inputs ran each group's (question, reference) once
        assert r["shape/rm_prefix_len"] > 0


def test_a_group_with_no_correct_rollout_takes_the_reference_solution_on_device():
    """Group 1 (all wrong) has a reference solution: pos_row -1, its host tokens as positive,
    and its two highest-scored wrong rollouts (all 4 rows are candidates; scores all 0: rows
    4 and 5, the first ones) as negatives."""
    pairs, stats = cooper.ranked_rollout_pairs(LABELS, G, K, has_reference=[True] * 4)
    assert pairs.pos_row.tolist() == [0, 0, -1, -1, 1, 1, 0, 0]
    assert pairs.valid.tolist() == [1, 1, 1, 1, 1, 0, 1, 1]
    assert stats["pairs/reference_positive"] == 2 and stats["pairs/no_positive"] == 0
    host = np.zeros((8, 3), np.int32)
    host[2:4] = [7, 8, 9]  # the reference's RM input, longer than the rollouts' (1 token)
    pairs = pairs.replace(pos_tokens=host, pos_mask=(host > 0).astype(np.int32))
    out = resolve_pairs(jax.tree_util.tree_map(jnp.asarray, pairs), _rm_inputs(),
                        jnp.asarray(SCORES), G)
    assert out.pos_tokens.shape == (8, 3)  # padded on the right to one length
    assert np.asarray(out.pos_tokens[2]).tolist() == [7, 8, 9]
    assert np.asarray(out.pos_tokens[0]).tolist() == [100, 0, 0]
    assert np.asarray(out.pos_mask[0]).tolist() == [1, 0, 0]
    assert (np.asarray(out.neg_tokens[2:4, 0]) - 100).tolist() == [4, 5]


def test_host_strategies_take_the_reference_solution_where_no_rollout_is_right():
    from coop_jax.verify import RuleVerifier
    records = [{"question": "3+4", "reference": "7", "solution": "3+4=7. #### 7"},
               {"question": "5+5", "reference": "10", "solution": None}]
    texts = ["3+4=8. #### 8", "3+4=9. #### 9", "5+5=11. #### 11", "5+5=9. #### 9"]
    labels = np.zeros(4, np.float32)
    with RuleVerifier(num_workers=1, timeout_s=5.0) as verifier:
        pairs, stats = cooper.build_pairs(
            "rollout", records, texts, labels, ["8", "9", "11", "9"], 2, verifier=verifier,
            references=cooper.reference_solutions(records))
    assert pairs == [("3+4=7. #### 7", "3+4=8. #### 8"), None]  # record 2 has no solution
    assert stats["pairs/reference_positive"] == 1 and stats["pairs/no_positive"] == 1
