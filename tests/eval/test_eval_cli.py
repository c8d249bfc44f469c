"""`coop-eval` (policy and RM modes, on tiny HF folders) and `coop-report` end to end."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from absl.app import UsageError

import torch  # noqa: E402  (the test extra installs the CPU build)
import transformers  # noqa: E402

from conftest import save_tiny_policy  # noqa: E402
from coop_jax.eval import cli, report  # noqa: E402
from coop_jax.hf.tokenizer import CHAR_TOKENIZER_DIR, load_tokenizer  # noqa: E402
from coop_jax.rm.input import RMInputFormat  # noqa: E402

COMMON = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
              num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
              pad_token_id=0, eos_token_id=1)


def _with_tokenizer(model, path):
    model.save_pretrained(path)
    for name in os.listdir(CHAR_TOKENIZER_DIR):
        shutil.copy(os.path.join(CHAR_TOKENIZER_DIR, name), os.path.join(path, name))
    return str(path)


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(**COMMON, tie_word_embeddings=True)
    return _with_tokenizer(transformers.Qwen2ForCausalLM(cfg).eval(),
                           tmp_path_factory.mktemp("lm"))


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory):
    torch.manual_seed(1)
    cfg = transformers.Qwen2Config(**COMMON, num_labels=1)
    return _with_tokenizer(transformers.Qwen2ForSequenceClassification(cfg).eval(),
                           tmp_path_factory.mktemp("rm"))


TRIPLES = [{"question": f"{i}+1", "reference": str(i + 1),
            "completion": f"{i}+1={i + 1 if i % 2 else i + 7}. #### {i + 1 if i % 2 else i + 7}",
            "label": bool(i % 2)} for i in range(6)]


def test_coop_eval_policy_hf(lm_dir, tmp_path):
    out = tmp_path / "out"
    rep = cli.main(["coop-eval", f"--hf={lm_dir}", "--dataset=synthetic", "--num_examples=4",
                    "--k=2", "--max_new_tokens=12", "--max_prompt_len=24", "--batch_size=4",
                    "--config.verifier.num_workers=1", f"--out={out}"])
    on_disk = json.loads((out / "report.json").read_text())
    assert on_disk["mode"] == "policy" and on_disk["source"]["hf"] == os.path.abspath(lm_dir)
    assert on_disk["template"] == "synthetic" and on_disk["k"] == 2 and on_disk["greedy"]
    assert on_disk["avg_at_k"] == rep["avg_at_k"]
    for key in ("greedy_accuracy", "avg_at_k", "pass_at_k", "mean_response_length"):
        assert on_disk[key]["ci_low"] <= on_disk[key]["mean"] <= on_disk[key]["ci_high"]
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 4 * (2 + 1)
    assert {r["mode"] for r in rows} == {"greedy", "sampled"}
    assert all(1 <= r["length"] <= 12 for r in rows)


CHAT = "{% for m in messages %}<u>{{ m['content'] }}</u>{% endfor %}<a>"


def test_coop_eval_chat_prompts_fit_or_fail(lm_dir, tmp_path):
    """With --chat, the default prompt length fits the longest templated prompt; a length that
    would cut a prompt through its chat template is a usage error, not a warning."""
    chat_dir = tmp_path / "chat_lm"
    shutil.copytree(lm_dir, chat_dir)
    config_path = chat_dir / "tokenizer_config.json"
    tok_config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps(tok_config | {"chat_template": CHAT}))
    args = ["coop-eval", f"--hf={chat_dir}", "--chat", "--dataset=synthetic", "--num_examples=3",
            "--k=0", "--max_new_tokens=4", "--config.verifier.num_workers=1"]
    rep = cli.main([*args, f"--out={tmp_path / 'out'}"])
    rows = [json.loads(line) for line in (tmp_path / "out" / "samples.jsonl").open()]
    longest = max(len(r["prompt"]) for r in rows)  # one character per token here
    assert rep["max_prompt_len"] == longest and all(r["prompt"].startswith("<u>") for r in rows)
    with pytest.raises(UsageError, match=f"--max_prompt_len=8 cuts 3 of 3 chat prompts.*"
                                         f"longest has {longest} tokens"):
        cli.main([*args, "--max_prompt_len=8", f"--out={tmp_path / 'cut'}"])


def test_coop_eval_rm_hf_matches_transformers(rm_dir, tmp_path):
    triples = tmp_path / "triples.jsonl"
    triples.write_text("\n".join(json.dumps(t) for t in TRIPLES) + "\n")
    out = tmp_path / "rm_out"
    rep = cli.main(["coop-eval", f"--hf={rm_dir}", f"--rm_triples={triples}", "--max_len=48",
                    "--batch_size=4", f"--out={out}"])  # 6 triples in 2 fixed-size batches
    assert rep["mode"] == "rm" and rep["num_triples"] == 6 and rep["num_positive"] == 3
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [r["label"] for r in rows] == [t["label"] for t in TRIPLES]
    # The scores are the transformers model's logits on the same right-padded RM inputs: by
    # default the <question> is the full prompt of the dataset's template ("synthetic": "q = ").
    assert (rep["question_format"], rep["template"], rep["truncation_side"]) == (
        "prompt", "synthetic", "left")
    tok = load_tokenizer(rm_dir)
    ids, mask = RMInputFormat(max_len=48, template="synthetic").tokenize_triples(tok, TRIPLES)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(rm_dir)
    with torch.no_grad():
        ref = model(input_ids=torch.tensor(ids, dtype=torch.long),
                    attention_mask=torch.tensor(mask, dtype=torch.long)).logits[:, 0].numpy()
    np.testing.assert_allclose([r["score"] for r in rows], ref, atol=1e-4)
    labels = np.array([t["label"] for t in TRIPLES])
    assert rep["accuracy"]["mean"] == pytest.approx(np.mean((ref > 0) == labels))
    for key in ("accuracy", "roc_auc"):
        assert rep[key]["ci_low"] <= rep[key]["mean"] <= rep[key]["ci_high"]


def test_coop_eval_checkpoint_uses_saved_config_and_tokenizer(tmp_path):
    """A coop-train workdir: model config, tokenizer ("" = the char tokenizer) and the training
    config (lengths, verifier workers) come from the checkpoint meta; --config.x overrides it."""
    from coop_jax.config import base_config

    config = base_config()
    config.verifier.num_workers, config.data.max_prompt_len = 1, 24
    config.rollout.max_new_tokens, config.eval.batch_size = 12, 4
    save_tiny_policy(tmp_path / "work", 3, config)
    rep = cli.main(["coop-eval", f"--checkpoint={tmp_path / 'work'}", "--num_examples=3",
                    "--k=0", "--config.rollout.max_new_tokens=10", f"--out={tmp_path / 'out'}"])
    assert rep["source"]["step"] == 3 and rep["k"] == 0 and "avg_at_k" not in rep
    assert rep["max_prompt_len"] == 24 and rep["max_new_tokens"] == 10
    assert rep["num_problems"] == 3 and rep["template"] == "synthetic"


@pytest.mark.parametrize("args,message", [
    (["--dataset=synthetic", "--out=x"], "neither --checkpoint nor --hf"),
    (["--hf=a", "--checkpoint=b", "--out=x"], "mutually exclusive"),
    (["--hf=a"], "--out is required"),
    (["--hf=a", "--out=x", "--k=0", "--no-greedy"], "nothing to evaluate"),
    (["--hf=a", "--out=x", "--top_p=1.5"], "--top_p"),
    (["--hf=a", "--out=x", "--num_examples=0"], "--num_examples"),
    (["--hf=a", "--out=x", "--bogus=1"], "bogus"),
    (["--hf=/nonexistent", "--out=x"], "--hf: no config.json"),
])
def test_coop_eval_flag_errors(args, message):
    with pytest.raises(UsageError, match=message):
        cli.main(["coop-eval", *args])


@pytest.mark.parametrize("args,message", [
    (["--template=bogus"], "--template must be one of"),
    (["--chat"], "chat template"),
    (["--dataset=gsm8k"], "data_dir is required"),  # no data_dir and no Hub
    (["--split=validation"], "--split=validation"),
])
def test_coop_eval_errors_after_loading(lm_dir, tmp_path, monkeypatch, args, message):
    import huggingface_hub

    def offline(*args, **kwargs):
        raise huggingface_hub.errors.LocalEntryNotFoundError("offline")

    monkeypatch.setenv("COOP_JAX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(UsageError, match=message):
        cli.main(["coop-eval", f"--hf={lm_dir}", f"--out={tmp_path}", *args])


def test_coop_eval_console_entry_reports_usage_errors():
    proc = subprocess.run([sys.executable, "-m", "coop_jax.eval.cli", "--dataset=synthetic",
                           "--out=x"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "coop-eval: error: neither --checkpoint nor --hf" in proc.stderr


def _fake_run(path, method, seed, initial, final, metrics):
    path.mkdir()
    (path / "summary.json").write_text(json.dumps(
        {"method": method, "seed": seed, "initial_accuracy": initial, "final_accuracy": final,
         "steps": 3, "wall_seconds": 12.5}))
    (path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    return str(path)


def test_coop_report_aggregates_runs(tmp_path):
    curve = lambda r, kl: [{"step": s, "reward_mean": r * s, "kl": kl * s,
                            "eval/greedy_accuracy": 0.1 * s} for s in (1, 2, 3)]
    runs = [_fake_run(tmp_path / "cooper_s0", "cooper", 0, 0.20, 0.30, curve(0.1, 0.01)),
            _fake_run(tmp_path / "cooper_s1", "cooper", 1, 0.20, 0.40, curve(0.2, 0.02)),
            _fake_run(tmp_path / "rule_s0", "rule", 0, 0.20, 0.25,
                      [{"step": 1, "response_length": 30}, {"step": 2}])]
    out = tmp_path / "report"
    result = report.main(["coop-report", *runs, f"--out={out}"])
    cooper = result["groups"]["cooper"]
    assert cooper["n"] == 2 and cooper["seeds"] == [0, 1]
    assert cooper["final_accuracy"]["mean"] == pytest.approx(0.35)
    # t(0.975, df=1) = 12.7062; std of (0.3, 0.4) = 0.0707107; half-width = t * std / sqrt(2)
    assert cooper["final_accuracy"]["half_width"] == pytest.approx(12.7062047 * 0.05, rel=1e-6)
    assert cooper["gain"]["mean"] == pytest.approx(0.15)
    assert result["groups"]["rule"]["final_accuracy"]["half_width"] is None
    md = (out / "report.md").read_text()
    assert "| cooper | 2 | 35.00 ± 63.53 | 20.00 ± 0.00 | 15.00 ± 63.53 |" in md
    assert "| rule | 1 | 25.00 | 20.00 | 5.00 |" in md
    png = (out / "curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert result["curves"] == ["reward_mean", "eval/greedy_accuracy", "kl", "response_length"]
    assert json.loads((out / "report.json").read_text())["groups"]["cooper"]["n"] == 2


def test_plot_curves_single_run_and_bad_inputs(tmp_path):
    png = tmp_path / "single" / "curves.png"
    plotted = report.plot_curves({"run": [{"step": 1, "kl": 0.1}, {"step": 2, "kl": 0.2}]},
                                 str(png))
    assert plotted == ["kl"] and png.is_file()
    assert report.plot_curves({"run": [{"step": 1}]}, str(tmp_path / "none.png")) == []
    assert not (tmp_path / "none.png").exists()
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "summary.json").write_text(json.dumps({"initial_accuracy": 0.1}))
    with pytest.raises(ValueError, match="'final_accuracy' must be a number"):
        report.load_run(str(bad))
    with pytest.raises(UsageError, match="at least one RUN_DIR"):
        report.main(["coop-report"])
