"""End-to-end training on the tiny config: every reward type, resume after kill -9, NaN policy."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import REPO, repo_config

from coop_jax.trainer import loop, rewards, rollouts, setup

ROOT = str(REPO)
TINY = os.path.join(ROOT, "configs", "tiny_test.py")


def tiny_config():
    return repo_config("tiny_test")


def _rows(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


@pytest.mark.parametrize("reward_type", rewards.REWARD_SOURCES.names())
def test_every_reward_type_trains(reward_type, tmp_path):
    c = tiny_config()
    c.reward.type = reward_type
    if reward_type == "cooper":
        c.cooper.negative = "perturb"
    summary = loop.train(c, str(tmp_path))
    rows = _rows(tmp_path)
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert rows[0]["eval/greedy_accuracy"] == summary["initial_accuracy"]
    assert rows[-1]["eval/greedy_accuracy"] == summary["final_accuracy"]
    assert summary["steps"] == 2 and summary["reward_type"] == reward_type
    # every evaluation logs greedy and avg@k; the summary names the headline (avg@k by default)
    for r in (rows[0], rows[-1]):
        assert r["eval/headline_accuracy"] == r["eval/sampled_accuracy"]
        assert 0.0 <= r["eval/greedy_accuracy"] <= 1.0
    assert summary["headline"] == "avg@2 (T=0.7, top-p 0.95)"
    assert summary["final_headline_accuracy"] == rows[-1]["eval/sampled_accuracy"]
    assert summary["initial_headline_accuracy"] == summary["initial_sampled_accuracy"]
    rows = rows[1:]
    for r in rows:
        assert np.isfinite(r["loss"]) and 0.0 <= r["rule_accuracy"] <= 1.0
    if reward_type in ("static_rm", "cooper", "hybrid"):
        assert "rm_rule_agreement" in rows[0] and "proxy_reward_mean" in rows[0]
    if reward_type in ("static_rm", "cooper", "hybrid"):  # the RM on the policy's rollouts
        assert all(0.0 <= r["rm_onpolicy_auc"] <= 1.0 for r in rows
                   if r.get("rm_onpolicy_auc") is not None)
        assert "rm_onpolicy_pair_accuracy" in rows[0]
    if reward_type == "cooper":
        assert "rm_loss" in rows[0] and "pairs/valid" in rows[0]
        assert "rm_rule_agreement_after" in rows[0] and "rm_onpolicy_auc_after" in rows[0]
        _check_export(tmp_path)
    if reward_type in ("majority_vote", "corewarding_1", "corewarding_2"):
        assert "pseudo_label_accuracy" in rows[0]
    assert all(0.0 <= r["rollout/padding_waste"] < 1.0 for r in rows)
    if reward_type != "corewarding_1":  # one trained view: each rollout has its rule label
        assert all(0.0 <= r["all_wrong_group_fraction"] <= 1.0 for r in rows)
        if reward_type == "rule":  # an all-wrong group's rule rewards are equal: no advantage
            assert all(r["all_wrong_advantage_abs_mean"] in (None, 0.0) for r in rows)
    assert os.path.exists(tmp_path / "summary.json") and os.path.exists(tmp_path / "curves.png")


def test_sft_warm_start_dynamic_sampling_and_overlong_options(tmp_path):
    c = tiny_config()
    c.sft.update(steps=2, batch_size=4, max_len=20, corrupt_fraction=0.5)
    c.rl.update(dynamic_sampling=True, dynamic_max_draws=2, overlong="penalty",
                overlong_cache_len=4, advantage="rloo", aggregation="seq_mean_token_mean")
    loop.train(c, str(tmp_path))
    rows = _rows(tmp_path)
    assert rows[1]["dynamic/draws"] >= 1


def test_kl_to_start_and_strict_numeric_gold(tmp_path):
    """rl.log_kl_to_start with kl_coef = 0: KL(pi || pi_start) on the rollouts is 0 at step 1
    (the policy is the start policy) and > 0 after updates, with no KL term in the loss; the
    strict_numeric gold is also the evaluation's "_strict" accuracy."""
    import dataclasses

    c = tiny_config()
    c.rl.update(kl_coef=0.0, log_kl_to_start=True)
    c.verifier.extraction = "strict_numeric"
    c.train.steps = 3
    trainer = loop.Trainer(c, str(tmp_path))
    alternate = lambda x: ([np.arange(len(x.views[0])) % 2 * 1.0], {})  # a learning signal
    trainer.setup = dataclasses.replace(
        trainer.setup, source=dataclasses.replace(trainer.setup.source, host=alternate))
    summary = trainer.run()
    rows = _rows(tmp_path)[1:]
    assert rows[0]["kl_to_start"] == pytest.approx(0.0, abs=1e-7)
    assert rows[0]["kl_to_start_seq"] == pytest.approx(0.0, abs=1e-6)
    assert rows[-1]["kl_to_start"] > 1e-6 and np.isfinite(rows[-1]["kl_to_start_seq"])
    assert all("kl" not in r for r in rows)
    assert 0.0 <= summary["final_accuracy_strict"] <= 1.0


def test_log_kl_to_start_refuses_an_ema_teacher_reference():
    c = tiny_config()
    c.reward.type, c.rl.log_kl_to_start = "corewarding_2", True
    with pytest.raises(ValueError, match="rl.log_kl_to_start"):
        setup.validate_config(c)


def test_nan_loss_stops_with_the_step(tmp_path, monkeypatch):
    c = tiny_config()
    trainer = loop.Trainer(c, str(tmp_path))
    step = trainer.step

    def poisoned(state, batch):
        new_state, outputs = step(state, batch)
        return new_state, outputs.replace(metrics=dict(outputs.metrics, loss=np.float32("nan")))

    trainer.step = poisoned
    with pytest.raises(FloatingPointError, match="step 0"):
        trainer.run()


def test_overlap_trains_on_rollouts_of_the_previous_parameters(tmp_path):
    """rollout.overlap: batch 0 is the on-policy batch of step 0 (what a run without overlap
    samples), batch t >= 1 is what the parameters update t-1 started from sample at step t; the
    PPO ratio uses those behaviour log-probs."""
    import dataclasses

    import jax

    from coop_jax import data
    from coop_jax.trainer.step import _logprobs
    c = tiny_config()
    c.rollout.overlap = True
    c.train.steps = 3
    trainer = loop.Trainer(c, str(tmp_path))
    # the untrained tiny policy is never right: alternate rewards give every group a signal
    alternate = lambda x: ([np.arange(len(x.views[0])) % 2 * 1.0], {})
    trainer.setup = dataclasses.replace(
        trainer.setup, source=dataclasses.replace(trainer.setup.source, host=alternate))
    compiled, seen = trainer.step, []

    def recording(state, batch):  # the parameters each update starts from (donated by it)
        seen.append((batch, jax.tree_util.tree_map(lambda x: x.copy(), state.policy.params)))
        return compiled(state, batch)

    trainer.step = recording
    trainer.run()
    rows = _rows(tmp_path)[1:]
    for r in rows:
        assert np.isfinite(r["loss"]) and 0.0 <= r["rule_accuracy"] <= 1.0
        assert r["time/rollout_wait"] >= 0.0
        assert r["advantage_abs_mean"] > 0 and r["grad_norm"] > 0  # a learning signal
    # step 0 samples on-policy: its ratio is 1 up to the sampler's numerics; later steps' is not
    assert rows[0]["approx_kl_old"] < 1e-6 and rows[0]["ratio_mean"] == pytest.approx(1, abs=1e-3)
    assert rows[1]["approx_kl_old"] > 1e-6
    pipeline = data.PromptPipeline(trainer.records.train, batch_size=c.rollout.prompts_per_step,
                                   seed=c.seed)
    for step, (batch, params) in enumerate(seen):
        behaviour = seen[max(step - 1, 0)][1]
        out = rollouts.sample_rollouts(trainer.setup, behaviour, None, pipeline.next_batch(),
                                       rollouts.rollout_key(c.seed, step)).views[0]
        np.testing.assert_array_equal(batch.tokens, np.asarray(out.tokens))
        np.testing.assert_allclose(batch.behaviour.logprobs, np.asarray(out.logprobs),
                                   atol=1e-6)
        np.testing.assert_allclose(batch.behaviour.entropy, np.asarray(out.entropy),
                                   atol=1e-6)
        if step:  # the update's own parameters are one step ahead of the behaviour policy
            own = np.asarray(_logprobs(params, compiled.cfg, batch)[0]) * batch.mask
            assert np.abs(own - batch.behaviour.logprobs).max() > 1e-4


@pytest.mark.parametrize("overlap", [False, True], ids=["series", "overlap"])
def test_truncated_importance_sampling_in_a_run(tmp_path, overlap):
    """rl.tis_cap: the batch keeps the sampler's log-probs, the step weighs the loss by the
    capped learner / sampler ratio and logs it. In series the sampler is the learner's own
    policy, so the weights are 1 up to the two implementations' numerics; under overlap the
    sampler is one step stale from step 2 on."""
    c = tiny_config()
    c.rl.tis_cap, c.rollout.overlap, c.train.steps = 2.0, overlap, 3
    c.rl.entropy_coef = 0.05  # a gradient for the never-right untrained policy
    loop.train(c, str(tmp_path))
    rows = _rows(tmp_path)[1:]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["ratio_mean"] == pytest.approx(1.0, abs=1e-3)  # the old policy is the learner
        assert 0 < r["tis_weight_mean"] <= 2.0 and 0 <= r["tis_truncated_frac"] <= 1
    assert rows[0]["tis_log_ratio_abs_mean"] < 1e-4  # step 1 is on-policy either way
    if overlap:
        assert max(r["tis_log_ratio_abs_mean"] for r in rows[1:]) > 1e-4
    else:
        assert all(r["tis_log_ratio_abs_mean"] < 1e-4 for r in rows)


def _cli(workdir, steps, overlap=False):
    return [sys.executable, "-m", "coop_jax.trainer.cli", f"--config={TINY}",
            f"--workdir={workdir}",
            f"--config.train.steps={steps}", "--config.train.checkpoint_every=2",
            f"--config.rollout.overlap={overlap}"]


# With rollout.overlap the step-2 checkpoint holds step 2's pending rollouts and the resumed run
# prepares them again: that kill -9 and resume is tests/trainer/test_multihost.py's Cooper run
# (on 2 processes, against the 1-process run), so here the rollouts are sampled in series only.
def test_kill9_resume_matches_uninterrupted_run(tmp_path, overlap=False):
    # The three processes share a persistent compilation cache (the suite's when it has one):
    # only the first one compiles.
    cache = os.environ.get("JAX_COMPILATION_CACHE_DIR") or str(tmp_path / "jax_cache")
    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=cache,
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    steps = 4
    full, killed = tmp_path / "full", tmp_path / "killed"
    subprocess.run(_cli(full, steps, overlap), check=True, env=env, capture_output=True, timeout=600)
    proc = subprocess.Popen(_cli(killed, steps, overlap), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while time.time() < deadline:  # kill -9 once step 3 ran (after the step-2 checkpoint)
        if os.path.exists(killed / "metrics.jsonl") and any(
                r["step"] == 3 for r in _rows(killed)):
            proc.send_signal(signal.SIGKILL)
            break
        if proc.poll() is not None:
            pytest.fail("training finished before it could be killed")
        time.sleep(0.05)
    proc.wait(timeout=60)
    assert not os.path.exists(killed / "summary.json")
    subprocess.run(_cli(killed, steps, overlap), check=True, env=env, capture_output=True,
                   timeout=600)
    volatile = ("time/", "tokens_per_second")
    strip = lambda r: {k: v for k, v in r.items() if not k.startswith(volatile)}
    a, b = _rows(full), _rows(killed)
    assert [r["step"] for r in b] == [0, 1, 2, 3, 4]
    from coop_jax import checkpoint
    ckpt = checkpoint.Checkpointer(str(killed / "checkpoints"))
    assert ckpt.read_meta(2)["pending_rollouts"] is overlap
    ckpt.close()
    for ra, rb in zip(a[3:], b[3:]):
        ka, kb = strip(ra), strip(rb)
        assert ka.keys() == kb.keys()
        for k in ka:
            assert ka[k] == pytest.approx(kb[k], rel=1e-5, abs=1e-6), k



def _check_export(workdir):
    """coop-export of both models gives HF folders with the checkpoint's outputs."""
    from coop_jax import checkpoint, hf, models
    from coop_jax.checkpoint import export

    tokens = np.array([[5, 6, 7, 8, 9]], np.int32)
    for which in ("policy", "rm"):
        out = export.export(str(workdir), str(workdir / f"export_{which}"), which)
        cfg, params, _ = checkpoint.load_model(str(workdir), which)
        lm = hf.load(out)
        assert lm.config.num_labels == (1 if which == "rm" else 0)
        # the exported folder's tokenizer is still the char tokenizer (spaces included), even
        # though its config.json names a Qwen2 model
        from coop_jax.hf.tokenizer import load_tokenizer
        text = "9+8 = 17. #### 17"
        assert lm.tokenizer().encode(text) == load_tokenizer().encode(text)
        if which == "rm":
            mask = np.ones_like(tokens)
            np.testing.assert_allclose(lm.scores(tokens, mask),
                                       models.reward_scores(params, cfg, tokens, mask), atol=1e-5)
        else:
            np.testing.assert_allclose(lm.logits(tokens), models.lm_logits(params, cfg, tokens),
                                       atol=1e-5)


def test_corewarding_2_dynamic_sampling_applies_the_ema_once_per_step(tmp_path):
    import dataclasses

    c = tiny_config()
    c.reward.type = "corewarding_2"
    c.rl.update(dynamic_sampling=True, dynamic_max_draws=3)
    trainer = loop.Trainer(c, str(tmp_path))
    calls, draws = [], []

    def hook(state, step, options):
        calls.append(step)
        return rewards.ema_teacher_update(state, step, options)

    def host(x):  # equal rewards in every group: nothing is informative, every draw is taken
        draws.append(1)
        return [np.zeros(len(x.views[0]), np.float32)], {}

    trainer.setup = dataclasses.replace(trainer.setup, source=dataclasses.replace(
        trainer.setup.source, before_step=hook, host=host))
    trainer.run()
    assert calls == [0, 1] and len(draws) == 6
    assert [r["dynamic/draws"] for r in _rows(tmp_path)[1:]] == [3, 3]
