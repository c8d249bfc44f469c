"""`coop_jax.trainer.batch`: padding trimmed to the batch (`trim_padding`, `rl.pad_buckets`)."""
from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

import test_train_step as step_test
from coop_jax import models
from coop_jax.trainer.batch import (TrainBatch, bucket_lengths, padding_window, trim_padding,
                                    valid_span)
from coop_jax.rm.step import RMUpdate
from coop_jax.trainer.step import StepConfig


@pytest.mark.parametrize("full,buckets,expected", [
    (64, 4, (16, 32, 48, 64)), (80, 4, (24, 40, 64, 80)), (8, 4, (8,)), (12, 4, (8, 12)),
    (64, 1, (64,)), (100, 3, (40, 72, 100))])
def test_bucket_lengths_are_even_steps_rounded_up_to_8(full, buckets, expected):
    assert bucket_lengths(full, buckets) == expected


def test_the_window_holds_the_valid_columns_on_the_padded_side():
    right = np.zeros((3, 64), bool)
    right[0, :5], right[2, :21] = True, True
    assert valid_span([right]) == (0, 21)
    assert padding_window((0, 21), 64, 4) == (0, 32)
    left = np.zeros((2, 80), bool)
    left[0, 70:], left[1, 55:] = True, True
    assert valid_span([left]) == (55, 80)
    assert padding_window((55, 80), 80, 4) == (40, 40)  # the last 40 columns
    assert valid_span([np.zeros((2, 12), bool)]) == (12, 0)  # nothing valid: the first bucket
    assert padding_window((12, 0), 12, 4) == (4, 8)


def _widened(batch: TrainBatch, extra: int = 20) -> TrainBatch:
    """`batch` with `extra` more padding columns on every padded axis (prompts on the left)."""
    flat = batch.to_flat()
    for k, v in flat.items():
        if v.ndim == 2:
            pad = np.zeros((v.shape[0], extra), v.dtype)
            flat[k] = np.concatenate([pad, v] if k.startswith("prompt") else [v, pad], axis=1)
    return TrainBatch.from_flat(flat)


def test_trim_padding_keeps_every_valid_token_and_its_position():
    wide = _widened(step_test._batch(1))
    cut, lengths = trim_padding(wide, 4)
    assert lengths == {"prompt": 8, "response": 8, "rm": 16, "pair": 16}
    for name in ("prompt", "", "rm_", "pair_pos_", "pair_neg_"):
        tokens, mask = (f"{name}tokens", f"{name}mask") if name != "prompt" else (
            "prompt_tokens", "prompt_mask")
        full, short = wide.to_flat(), cut.to_flat()
        assert short[mask].sum() == full[mask].sum()
        keep = lambda t, m: [list(row[r.astype(bool)]) for row, r in zip(t, m)]
        assert keep(short[tokens], short[mask]) == keep(full[tokens], full[mask])
        np.testing.assert_array_equal(models.forward.positions_from_mask(short[mask]).max(-1),
                                      models.forward.positions_from_mask(full[mask]).max(-1))
    assert trim_padding(wide, 1)[1] == {"prompt": 26, "response": 25, "rm": 32, "pair": 32}


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_sum_norm"])
def test_a_trimmed_cooper_step_equals_the_full_width_step(aggregation):
    """The policy and RM update of a batch cut to its buckets is the full-width batch's to
    float32 rounding (attention and the log-prob kernel reduce over fewer padding columns); the
    Dr.GRPO constant stays the configured length (agg_max_len)."""
    wide = _widened(step_test._batch(1))
    cut, _ = trim_padding(wide, 4)
    loss = dataclasses.replace(step_test.LOSS, aggregation=aggregation,
                               agg_max_len=wide.tokens.shape[1])
    cfg = StepConfig(policy=step_test.XLA_POLICY, loss=loss, group_size=step_test.G,
                     **step_test.RM_REWARD, rm_update=RMUpdate())
    run = lambda batch: step_test.jit_step(cfg, step_test.TX, step_test.RM_TX, donate=False)(
        step_test._state(True), batch)
    (full_state, full), (cut_state, trimmed) = run(wide), run(cut)
    for k in ("reward_mean", "rm_score_mean", "rm_loss", "rm_pair_acc_before", "grad_norm",
              "rm_grad_norm", "advantage_abs_mean", "kl"):
        assert float(trimmed[k]) == pytest.approx(float(full[k]), rel=1e-6, abs=1e-9), k
    step_test._close(trimmed, full, atol=1e-6)
    step_test._close(cut_state.policy.params, full_state.policy.params, atol=1e-6)
    step_test._close(cut_state.rm.params, full_state.rm.params, atol=1e-6)
    assert jax.tree_util.tree_structure(cut_state) == jax.tree_util.tree_structure(full_state)
