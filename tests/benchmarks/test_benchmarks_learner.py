"""`benchmarks/learner_step.py` and `benchmarks/vs_trl.py` without running them: how arms are
read, how a pair is summarised, and which prompts TRL gets (TRL itself is the optional `bench`
extra, not installed by the tests)."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from conftest import repo_config, repo_module

learner_step = repo_module("benchmarks/learner_step.py", "learner_step")


def test_an_arm_is_a_name_and_its_overrides():
    assert learner_step.parse_arm("trim:rl.pad_buckets=4,rl.reuse_loss_forward=True") == (
        "trim", ["rl.pad_buckets=4", "rl.reuse_loss_forward=True"])
    assert learner_step.parse_arm("baseline:") == ("baseline", [])
    for bad in ("", ":rl.pad_buckets=4", "trim:rl.pad_buckets"):
        with pytest.raises(argparse.ArgumentTypeError, match="NAME:FIELD=VALUE"):
            learner_step.parse_arm(bad)


def test_a_pair_compares_every_arm_with_the_first():
    rows = lambda loss: [{"step": 1, "loss": loss, "time/update": 9.0, "shape/response_len": 8}]
    runs = [{"arm": "full", "pair": 0, "median_update_s": 2.0, "compiled": 1, "rows": rows(0.5)},
            {"arm": "trim", "pair": 0, "median_update_s": 1.5, "compiled": 3, "rows": rows(0.25)}]
    arms = learner_step.summarise_pair(0, runs)["arms"]
    assert arms["full"]["ratio"] == 1.0 and arms["trim"]["ratio"] == 0.75
    assert arms["full"]["metrics"]["values_differing"] == 0
    assert arms["trim"]["metrics"]["differing"] == {
        "loss": {"steps": 1, "max_abs": 0.25, "max_rel": 0.5}}  # times and shapes left out


def test_trl_reads_the_prompts_of_coop_jax_steps_in_order():
    vs_trl = repo_module("benchmarks/vs_trl.py", "vs_trl")
    from coop_jax import data
    from coop_jax.trainer.setup import load_records
    config = repo_config("smollm2_arithmetic")
    rows = vs_trl.trl_prompts(config, steps=3)
    pipeline = data.PromptPipeline(load_records(config).train, batch_size=4, seed=config.seed)
    expected = [r for _ in range(3) for r in pipeline.next_batch()]
    assert len(rows) == 12 and [r["reference"] for r in rows] == [
        r["reference"] for r in expected]
    assert rows[0]["prompt"] == [{"role": "user", "content": data.format_prompt(
        "oneline", expected[0]["question"])}]


@pytest.mark.parametrize("script,flag", [
    ("learner_step.py", "--arm NAME:FIELD=VALUE"), ("vs_trl.py", "--arm NAME:FIELD=VALUE"),
    ("prefix_sharing.py", "--group-sizes"), ("learner_breakdown.py", "--repeats"),
    ("rm_train_cost.py", "--layers"), ("same_metrics.py", "--before"),
    ("profile_gradient_pass.py", "--side")])
def test_the_benchmarks_answer_help(script, flag):
    done = subprocess.run([sys.executable, f"benchmarks/{script}", "--help"],
                          capture_output=True, text=True, cwd=learner_step.ROOT)
    assert done.returncode == 0 and flag in done.stdout, done.stderr


def test_a_bad_sweep_argument_is_one_line_naming_the_flag():
    done = subprocess.run([sys.executable, "benchmarks/prefix_sharing.py", "--prompt-lens=8,x"],
                          capture_output=True, text=True, cwd=learner_step.ROOT)
    assert done.returncode == 2 and "--prompt-lens" in done.stderr.splitlines()[-1]


def test_same_metrics_compares_every_non_timing_value():
    same = repo_module("benchmarks/same_metrics.py", "same_metrics")
    a = [{"step": 0, "loss": 0.5, "rm/auc": None, "time/step": 1.0},
         {"step": 1, "loss": float("nan"), "tokens_per_second": 3.0}]
    b = [{"step": 0, "loss": 0.5, "rm/auc": None, "time/step": 2.0},
         {"step": 1, "loss": float("nan"), "tokens_per_second": 9.0}]
    assert same.differences(a, b) == (5, [])  # step, loss, rm/auc; step, loss; no timing key
    b[0]["loss"] = 0.5 + 1e-12
    b[1]["extra"] = 1
    compared, diffs = same.differences(a, b)
    assert diffs == ["step 0: loss 0.5 vs 0.500000000001", "step 1: extra only in after"]
    assert same.differences(a, b[:1])[1][0].startswith("steps differ")
    # a metric the new tree adds may be declared: it is then left out, anything else still counts
    assert same.differences(a, b, frozenset({"extra"}))[1] == [
        "step 0: loss 0.5 vs 0.500000000001"]
    assert same.differences(b, a, frozenset({"extra"}))[1][-1] == "step 1: extra only in before"


def test_the_profile_names_each_compiled_instruction_by_category_and_model_site():
    import jax
    import jax.numpy as jnp
    profile = repo_module("benchmarks/profile_gradient_pass.py", "profile_gradient_pass")

    def layer(x, w):
        with jax.named_scope("layers_3"):
            return jnp.tanh(x @ w).sum()
    hlo = jax.jit(layer).lower(jnp.ones((8, 16)), jnp.ones((16, 4))).compile().as_text()
    ops = profile.hlo_opcodes(hlo)
    assert {"matmul", "reduction fusion"} <= {category for category, _ in ops.values()}
    sites = {site for category, site in ops.values() if category == "matmul"}
    assert any(site.startswith("layers_*/") for site in sites), sites
    assert all("jit(" not in site.split("/")[0] for site in sites), sites
    assert [profile.torch_category(op) for op in (
        "aten::mm", "aten::bmm", "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
        "aten::_log_softmax", "aten::copy_", "aten::sum", "aten::mul")] == [
        "matmul", "matmul", "attention", "softmax", "copy / transpose", "reduction",
        "elementwise / other"]


def test_the_rm_half_of_the_prefix_sweep_reports_both_parts(tmp_path):
    """`prefix_sharing.py --rm`: the scoring forward and the pair gradient, shared and unshared,
    at one tiny grid point (its pair scores are checked equal inside)."""
    sweep = repo_module("benchmarks/prefix_sharing.py", "prefix_sharing")
    out = tmp_path / "rm.json"
    sweep.main(["--rm", "--layers=1", "--prompts=1", "--prompt-lens=8", "--response-lens=4",
                "--group-sizes=2", "--repeats=1", f"--out={out}"])
    result = json.loads(out.read_text())
    (row,) = result["rows"]
    assert result["half"] == "rm" and (row["prefix_len"], row["suffix_len"]) == (8, 4)
    assert row["rows"] == 2 and row["pair_position_ratio"] == pytest.approx(8 / 12)
    for part in ("scoring", "pairs"):
        assert row[f"{part}_shared_s"] > 0 and row[f"{part}_unshared_s"] > 0
        assert row[f"{part}_ratio"] == pytest.approx(
            row[f"{part}_shared_s"] / row[f"{part}_unshared_s"])
