"""`coop-train-rm`: triples from a policy and the rule verifier (+ an HTTP judge), a tiny VerifyRM
trained on synthetic triples, and its checkpoint / HF export read back."""
import dataclasses
import json
import os

import numpy as np
import pytest
from absl.app import UsageError

from conftest import save_tiny_policy
from fake_openai import FakeOpenAI

from coop_jax import config as config_lib
from coop_jax import data, optim
from coop_jax.rm.train import (JUDGE_SYSTEM_PROMPT, RMState, cli, drop_overlong, http_judge,
                               input_format, label_triples, parse_judge_verdict, split_triples,
                               starting_rm, train_reward_model)
from coop_jax.rm.input import TRIPLE_KEYS, write_triples
from coop_jax.rm.optim import RMOptimizerSettings, rm_optimizer
from coop_jax.rm.train import loop
from coop_jax.verify import RuleVerifier

RM_FLAGS = ["--config.reward_model.hidden_size=32", "--config.reward_model.intermediate_size=64",
            "--config.reward_model.num_layers=1", "--config.reward_model.num_heads=2",
            "--config.reward_model.num_kv_heads=1",
            "--config.reward_model.max_position_embeddings=128"]
R = "--config.rm_train."  # every coop-train-rm setting is in the config's rm_train section
MAX_LEN = 112  # the longest synthetic RM input below is 106 characters
# Measured on 8 split/init seeds: held-out accuracy reaches 1.0 by epoch 3-7 (12-16 steps each).
EPOCHS = 10


@pytest.fixture(scope="module")
def verifier():
    with RuleVerifier(num_workers=1, timeout_s=5.0) as v:
        yield v


def synthetic_groups(n: int, seed: int = 0):
    """Single-digit sums; per record the reference solution and the same solution with an
    off-by-ten final answer (a tiny 1-layer RM cannot learn digit equality in the CPU budget —
    see the report — but learns to reject an out-of-range final answer)."""
    cfg = data.SyntheticConfig(num_operands_min=2, num_operands_max=2, max_operand=4, ops="+")
    records = data.make_dataset(n, seed, cfg)
    groups = []
    for r in records:
        head, _, answer = r["solution"].rpartition("#### ")
        groups.append([r["solution"], f"{head}#### {int(answer) + 10}"])
    return records, groups


def test_split_triples_by_question():
    triples = [{"question": f"q{i % 10}", "reference": "1", "completion": str(i), "label": i % 2}
               for i in range(40)]
    train, held = split_triples(triples, 0.3, seed=1)
    assert len(train) + len(held) == 40
    assert len({t["question"] for t in held}) == 3
    assert not {t["question"] for t in held} & {t["question"] for t in train}
    assert split_triples(triples, 0.3, seed=1) == (train, held)
    assert split_triples(triples, 0.0, seed=1) == (triples, [])
    with pytest.raises(ValueError, match="heldout_fraction"):
        split_triples(triples, 1.0)
    with pytest.raises(ValueError, match="no training question"):
        split_triples(triples[:1], 0.5)


@pytest.mark.parametrize("reply,verdict", [
    ("correct", True), ("Incorrect.", False), ("The answer is not correct", False),
    ("<think>maybe correct? no</think>\n**Incorrect**", False),
    ("<think>it is wrong... wait</think> Verdict: \\boxed{correct}", True),
    ("I think it's wrong", False), ("Correct. (Earlier I wrote incorrect.) Final: correct", True),
    ("", None), (None, None), ("I cannot tell", None), ("incorrectly formatted but right", None),
])
def test_parse_judge_verdict(reply, verdict):
    assert parse_judge_verdict(reply) is verdict


def test_label_triples_rule_labels_and_judge_intersection(verifier):
    records, groups = synthetic_groups(40, seed=3)
    first = {}
    for i, r in enumerate(records):  # six records with distinct questions
        first.setdefault(r["question"], i)
    keep = sorted(first.values())[:6]
    records, groups = [records[i] for i in keep], [groups[i] for i in keep]
    groups[0] = groups[0] + [groups[0][0], "  "]  # a duplicate and an empty completion

    def reply(body):
        user = body["messages"][1]["content"]
        completion = user.split("Candidate solution:\n")[1].split("\n\n")[0]
        if completion.startswith(records[1]["question"] + "="):
            return 500, None  # HTTP error: no verdict
        if completion.startswith(records[2]["question"] + "="):
            return 200, "<think>hmm</think> correct"  # wrong for the negative: a disagreement
        return 200, "incorrect" if "#### 1" in completion and completion[-2:].isdigit() \
            else "The candidate is correct."

    triples, stats = label_triples(records, groups, verifier)
    assert stats["duplicates"] == 1 and stats["empty"] == 1 and stats["completions"] == 14
    assert [t["label"] for t in triples] == [True, False] * 6
    assert all(set(t) == set(TRIPLE_KEYS) for t in triples)

    with FakeOpenAI(reply) as server:
        judge = http_judge(server.url, "judge-x", max_tokens=64, timeout_s=10,
                                    concurrency=3)
        judged, jstats = label_triples(records, groups, verifier, judge=judge)
    assert len(server.requests) == 12
    path, body = server.requests[0]
    assert path == "/v1/chat/completions" and body["model"] == "judge-x"
    assert body["temperature"] == 0.0 and body["max_tokens"] == 64
    assert body["messages"][0] == {"role": "system", "content": JUDGE_SYSTEM_PROMPT}
    user = body["messages"][1]["content"]
    assert "Reference answer:" in user and "Candidate solution:" in user
    assert jstats["judge/no_verdict"] == 2 and jstats["judge/disagree"] == 1
    assert jstats["judge/agree"] == len(judged) == 9
    dropped = {records[1]["question"]}
    assert [t for t in judged if t["question"] in dropped] == []
    assert sum(t["label"] for t in judged) == jstats["num_positive"] == 5


def _save_policy(path):
    from coop_jax.config import base_config

    config = base_config()
    config.data.max_prompt_len, config.rollout.max_new_tokens = 16, 10
    save_tiny_policy(path, 1, config)


def test_build_triples_cli_from_a_tiny_policy(tmp_path, capsys):
    _save_policy(tmp_path / "policy")
    out, held = tmp_path / "triples.jsonl", tmp_path / "held.jsonl"
    stats = cli.main(["coop-train-rm", R + "mode=build_triples",
                           R + f"policy_checkpoint={tmp_path / 'policy'}", R + "dataset=synthetic",
                           R + "num_examples=6", R + "samples_per_question=2",
                           "--config.eval.batch_size=6", "--config.verifier.num_workers=1",
                           R + "heldout_fraction=0.34", R + f"heldout_out={held}",
                           R + f"out={out}"])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    held_rows = [json.loads(line) for line in held.read_text().splitlines()]
    assert stats["completions"] == 12
    assert len(rows) + len(held_rows) == 12 - stats["empty"] - stats["duplicates"] \
        - stats["verifier_timeouts"]
    assert rows and all(list(r) == list(TRIPLE_KEYS) for r in rows + held_rows)
    assert not {r["question"] for r in rows} & {r["question"] for r in held_rows}
    # The policy checkpoint's own lengths apply: at most 10 new characters.
    assert all(len(r["completion"]) <= 10 for r in rows)
    # An untrained policy solves nothing; its rule labels are all negative.
    assert stats["train"]["num_positive"] == 0 and stats["train"]["num_negative"] == len(rows)
    assert "negative" in capsys.readouterr().out


@pytest.fixture(scope="module")
def trained(tmp_path_factory, verifier):
    """A tiny RM trained through the CLI on rule-labelled synthetic triples."""
    tmp = tmp_path_factory.mktemp("rm")
    records, groups = synthetic_groups(120)
    triples, _ = label_triples(records, groups, verifier)
    train, held = split_triples(triples, 0.2, seed=0)
    write_triples(str(tmp / "train.jsonl"), train)
    write_triples(str(tmp / "held.jsonl"), held)
    summary = cli.main(
        ["coop-train-rm", R + "mode=train", R + f"triples={tmp / 'train.jsonl'}",
         R + f"heldout={tmp / 'held.jsonl'}", R + f"workdir={tmp / 'work'}", R + f"epochs={EPOCHS}",
         R + "learning_rate=3e-3", R + "schedule=constant", R + "batch_size=16",
         R + f"max_len={MAX_LEN}",
         R + f"export_hf={tmp / 'hf'}", *RM_FLAGS])
    return tmp, summary, held


def test_tiny_rm_learns_held_out_questions(trained):
    tmp, summary, held = trained
    labels = [t["label"] for t in held]
    assert 0.4 <= np.mean(labels) <= 0.6 and summary["num_heldout"] == len(held) >= 30
    assert summary["heldout_accuracy"] >= 0.9 and summary["heldout_auc"] >= 0.95
    rows = [json.loads(line) for line in (tmp / "work" / "rm_metrics.jsonl").read_text()
            .splitlines()]
    epochs = [r for r in rows if "heldout/accuracy" in r]
    assert [r["epoch"] for r in epochs] == list(range(EPOCHS + 1))
    assert epochs[0]["heldout/accuracy"] <= 0.6  # the untrained RM is at chance
    assert epochs[-1]["train/epoch_loss"] < epochs[1]["train/epoch_loss"]
    on_disk = json.loads((tmp / "work" / "rm_summary.json").read_text())
    assert on_disk["heldout_accuracy"] == summary["heldout_accuracy"]
    assert on_disk["steps"] == EPOCHS * int(np.ceil(summary["num_train"] / 16))


def test_rm_checkpoint_and_hf_export_give_the_same_scores(trained, tmp_path):
    import torch
    import transformers
    from coop_jax import hf
    from coop_jax.checkpoint import load_model
    from coop_jax.eval import cli
    from coop_jax.hf.tokenizer import load_tokenizer
    from coop_jax.rm.input import RMInputFormat
    from coop_jax.rm.scoring import score_triples

    tmp, summary, held = trained
    cfg, params, meta = load_model(str(tmp / "work"), "rm")
    assert cfg.num_labels == 1 and cfg.hidden_size == 32 and cfg.num_layers == 1
    assert meta["tokenizer"] == "" and meta["config"]["rm"]["max_len"] == MAX_LEN
    # trained on the full prompt of the config's template (the default question_format)
    assert meta["config"]["rm"]["question_format"] == "prompt"
    assert meta["config"]["data"]["prompt_template"] == "synthetic"
    fmt = RMInputFormat(max_len=MAX_LEN, template="synthetic")
    tok = load_tokenizer()
    scores = score_triples(params, cfg, tok, held, fmt=fmt, batch_size=16)
    labels = np.array([t["label"] for t in held])
    assert np.mean((scores > 0) == labels) == pytest.approx(summary["heldout_accuracy"])

    lm = hf.load(str(tmp / "hf"))
    # the export spells out head_dim; everything else round-trips
    assert dataclasses.replace(lm.config, head_dim=None) == cfg
    assert lm.pad_token_id == tok.pad_token_id
    ids, mask = fmt.tokenize_triples(tok, held)
    np.testing.assert_allclose(np.asarray(lm.scores(ids, mask)), scores, atol=1e-4)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(str(tmp / "hf"))
    with torch.no_grad():
        ref = model(input_ids=torch.tensor(ids, dtype=torch.long),
                    attention_mask=torch.tensor(mask, dtype=torch.long)).logits[:, 0].numpy()
    np.testing.assert_allclose(ref, scores, atol=1e-4)

    # coop-eval reads the RM checkpoint with its saved tokenizer and max_len.
    rep = cli.main(["coop-eval", f"--checkpoint={tmp / 'work'}",
                    f"--rm_triples={tmp / 'held.jsonl'}", f"--out={tmp_path / 'eval'}"])
    assert rep["accuracy"]["mean"] == pytest.approx(summary["heldout_accuracy"])


@pytest.mark.parametrize("args,message", [
    ([], r"config.rm_train.mode must be one of \['build_triples', 'train'\], got ''"),
    ([R + "mode=train", R + "workdir=w"], "config.rm_train.triples is required"),
    ([R + "mode=train", R + "triples=/nonexistent.jsonl", R + "workdir=w"], "no such file"),
    ([R + "mode=build_triples", R + "out=x"], "exactly one of config.rm_train.policy_checkpoint"),
    ([R + "mode=build_triples", R + "policy_hf=a", R + "out=x", R + "judge_url=http://h"],
     "config.rm_train.judge_url and config.rm_train.judge_model"),
    ([R + "mode=build_triples", R + "policy_hf=a", R + "out=x", R + "heldout_fraction=0.1"],
     "config.rm_train.heldout_out"),
    ([R + "mode=train", R + "batch_size=0"], "config.rm_train.batch_size must be > 0"),
    ([R + "mode=train", R + "schedule=exponential"], "config.rm_train.schedule must be one of"),
    (["--mode=train"], "Unknown command line flag 'mode'"),
    ([R + "mode=train", "--config.reward_model.lora.rank=8"],
     "config.reward_model.lora.rank must be 0 for coop-train-rm"),
])
def test_coop_train_rm_flag_errors(args, message):
    with pytest.raises(UsageError, match=message):
        cli.main(["coop-train-rm", *args])


def test_train_errors_name_the_field(tmp_path, trained):
    tmp, _, _ = trained
    with pytest.raises(UsageError, match=r"config.rm_train.batch_size \(12\) must be a multiple"):
        cli.main(["coop-train-rm", R + "mode=train", R + f"triples={tmp / 'train.jsonl'}",
                       R + f"workdir={tmp_path / 'w'}", R + "batch_size=12", *RM_FLAGS])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q", "reference": "1", "completion": "c"}) + "\n")
    with pytest.raises(UsageError, match=r"triples\[0\] has no 'label'"):
        cli.main(["coop-train-rm", R + "mode=train", R + f"triples={bad}",
                       R + f"workdir={tmp_path / 'w'}"])
    # a rerun on a workdir resumes the run there, so it must have the same settings
    with pytest.raises(UsageError, match=r"holds an RM training with epochs=10, this run has 3"):
        cli.main(["coop-train-rm", R + "mode=train", R + f"triples={tmp / 'train.jsonl'}",
                       R + f"workdir={tmp / 'work'}", *RM_FLAGS])
    with pytest.raises(UsageError, match="config.rm_train.checkpoint_every must be >= 0"):
        cli.main(["coop-train-rm", R + "mode=train", R + "checkpoint_every=-1"])
    with pytest.raises(UsageError, match="config.rm_train.learning_rate must be > 0"):
        cli.main(["coop-train-rm", R + "mode=train", R + "learning_rate=0"])


def _tiny_rm(seed: int = 0):
    """(ModelConfig, host params, mesh) of a random 1-layer RM on 8 data shards."""
    import jax

    from coop_jax import config as config_lib
    from coop_jax import parallel
    section = config_lib.model_section(vocab_size=128, hidden_size=32, intermediate_size=64,
                                       num_layers=1, num_heads=2, num_kv_heads=1)
    mesh = parallel.make_mesh((8, 1, 1))
    opts = config_lib.rm_train_section()
    opts.seed = seed
    rm = starting_rm(section, mesh, opts)
    return rm.config, jax.device_get(rm.params), mesh  # the step donates its state


def test_gradient_accumulation_over_micro_batches_equals_one_batch():
    import jax

    from coop_jax.trainer.step import place_state
    cfg, params, mesh = _tiny_rm()
    opts = config_lib.rm_train_section()
    opts.update(learning_rate=1e-2, weight_decay=0.01, grad_clip=1.0, schedule="linear")
    tx = rm_optimizer(RMOptimizerSettings.for_rm_training(opts, total_steps=4))
    rng = np.random.default_rng(0)
    mask = np.arange(20)[None] < rng.integers(5, 21, size=(16, 1))
    host = {"tokens": rng.integers(0, 100, size=(16, 20)).astype(np.int32), "mask": mask,
            "labels": rng.integers(0, 2, size=16).astype(np.float32),
            "weight": np.r_[np.ones(13), np.zeros(3)].astype(np.float32)}
    results = []
    for micro in (1, 2, 4):
        state = place_state(RMState(np.asarray(0, np.int32), params, tx.init(params)),
                            mesh)
        shardings = jax.tree_util.tree_map(lambda x: x.sharding, state)
        step_fn, batch_sh = loop._make_step(cfg, tx, mesh, shardings, micro)
        batch = {k: jax.device_put(v, batch_sh[k]) for k, v in host.items()}
        state, metrics = step_fn(state, batch)
        assert int(state.step) == 1
        results.append((jax.device_get(state.params), jax.device_get(metrics)))
    (p1, m1), *rest = results
    for p, m in rest:
        np.testing.assert_allclose(m["loss"], m1["loss"], rtol=1e-5)
        np.testing.assert_allclose(m["grad_norm"], m1["grad_norm"], rtol=1e-4)
        # Adam divides by sqrt(v): float-order differences of tiny gradients show at ~1e-5 of lr
        jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-5), p, p1)


def test_weight_decay_mask_spares_biases_and_norm_weights():
    """With zero gradients AdamW's update is the decay alone: p <- p - lr * wd * p (constant lr
    0.5, wd 0.1: 2.0 -> 1.9) on the decayed parameters; biases and norm weights stay at 2.0 under
    "no_bias_norm", and every parameter is decayed under "all"."""
    import jax

    two = lambda *shape: np.full(shape, 2.0, np.float32)
    params = {"embed_tokens": {"embedding": two(4, 2)},
              "layers_0": {"input_layernorm": {"weight": two(2)},
                           "post_attention_layernorm": {"weight": two(2)},
                           "self_attn": {"q_proj": {"kernel": two(2, 2), "bias": two(2)}}},
              "norm": {"weight": two(2)}, "score": {"kernel": two(2, 1)}}
    spared = {"layers_0/input_layernorm/weight", "layers_0/post_attention_layernorm/weight",
              "layers_0/self_attn/q_proj/bias", "norm/weight"}
    opts = config_lib.rm_train_section()
    opts.update(learning_rate=0.5, weight_decay=0.1, schedule="constant", grad_clip=1.0)
    zeros = jax.tree_util.tree_map(np.zeros_like, params)
    for mask, spared_value in (("no_bias_norm", 2.0), ("all", 1.9)):
        opts.weight_decay_mask = mask
        tx = rm_optimizer(RMOptimizerSettings.for_rm_training(opts, total_steps=10))
        updates, _ = tx.update(zeros, tx.init(params), params)
        new = jax.tree_util.tree_map(lambda p, u: p + u, params, updates)
        for path, leaf in jax.tree_util.tree_flatten_with_path(new)[0]:
            name = "/".join(k.key for k in path)
            expected = spared_value if name in spared else 1.9
            np.testing.assert_allclose(leaf, expected, rtol=1e-6, err_msg=f"{mask}: {name}")
    # a real RM's mask: its norm weights and biases are the parameters left out
    _, rm_params, _ = _tiny_rm()
    decays = {"/".join(k.key for k in path): bool(d) for path, d in
              jax.tree_util.tree_flatten_with_path(
                  optim.no_decay_on_bias_or_norm(rm_params))[0]}
    off = sorted(n for n, d in decays.items() if not d)
    assert "norm/weight" in off and any(n.endswith("bias") for n in off)
    assert all(n.endswith(("norm/weight", "bias")) for n in off)
    assert decays["score/kernel"] and decays["embed_tokens/embedding"]
    opts.update(weight_decay_mask="biases", mode="train")
    with pytest.raises(ValueError, match=r"config.rm_train.weight_decay_mask must be one of"):
        config_lib.validate_rm_train(opts)


def test_linear_schedule_and_overlong_triples():
    from coop_jax.optim import SCHEDULES
    lr = SCHEDULES["linear"](1.0, 2, 10)
    np.testing.assert_allclose([lr(0), lr(2), lr(6), lr(10)], [0.0, 1.0, 0.5, 0.0], atol=1e-6)
    opts = config_lib.rm_train_section()
    assert (opts.schedule, opts.overlong, opts.max_chars, opts.warmup_ratio) == (
        "linear", "drop", 8000, 0.0)
    triples = [{"question": "q", "reference": "1", "completion": "x" * n, "label": 1}
               for n in (10, 7998, 7999)]
    kept, dropped = drop_overlong(triples, opts)
    assert [len(t["completion"]) for t in kept] == [10, 7998] and dropped == 1
    opts.overlong = "truncate"
    assert drop_overlong(triples, opts) == (triples, 0)
    opts.overlong, opts.max_chars = "drop", 5
    with pytest.raises(ValueError, match="rm_train.max_chars"):
        drop_overlong(triples, opts)
    opts.overlong, opts.mode = "keep", "train"
    with pytest.raises(ValueError, match="rm_train.overlong must be one of"):
        config_lib.validate_rm_train(opts)


def test_interrupted_training_resumes_exactly(tmp_path, verifier, monkeypatch):
    """Interrupted twice (mid-epoch, then just after an epoch's end) and rerun on its workdir,
    coop-train-rm writes the same rm_metrics.jsonl rows and final parameters as an uninterrupted
    run; a rerun of the finished run trains nothing."""
    import jax
    from coop_jax import checkpoint
    from coop_jax.config import base_config

    records, groups = synthetic_groups(12, seed=5)
    triples, _ = label_triples(records, groups, verifier)
    train, held = triples[:20], triples[20:]  # 8 rows per step: 3 steps an epoch, 9 in all
    config = base_config()
    config.reward_model.update(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2,
                               num_kv_heads=1, max_position_embeddings=128)
    config.rm_train.update(mode="train", epochs=3, batch_size=8, learning_rate=3e-3,
                           log_every=1, heldout_every=2, checkpoint_every=2, max_len=MAX_LEN)
    make_step = loop._make_step

    def interrupting(stop_at):  # the step function raises on its `stop_at`-th call
        def make(*args):
            step_fn, batch_sh = make_step(*args)
            calls = []

            def step(state, batch):
                calls.append(1)
                if len(calls) == stop_at:
                    raise KeyboardInterrupt("interrupted")
                return step_fn(state, batch)
            return step, batch_sh
        return make

    full = train_reward_model(config, train, str(tmp_path / "full"),
                                       heldout_triples=held)
    work = str(tmp_path / "work")
    for stop_at, resumed in ((6, None), (3, 4), (None, 6), (1, 9)):
        # run 1 stops in step 6 (checkpoint at step 4, mid-epoch 2); run 2 resumes at 4 and stops
        # in step 7 (checkpoint at 6, epoch 2's end); run 3 finishes; run 4 finds it finished
        monkeypatch.setattr(loop, "_make_step", interrupting(stop_at or 0))
        if stop_at in (6, 3):
            with pytest.raises(KeyboardInterrupt):
                train_reward_model(config, train, work, heldout_triples=held)
            assert not os.path.exists(os.path.join(work, "rm_summary.json"))
        else:
            summary = train_reward_model(config, train, work, heldout_triples=held)
            assert summary["resumed_from_step"] == resumed
    rows = lambda d: [json.loads(line) for line in open(os.path.join(d, "rm_metrics.jsonl"))]
    assert rows(work) == rows(str(tmp_path / "full"))
    assert [r["step"] for r in rows(work) if "train/epoch_loss" in r] == [3, 6, 9]
    assert summary["steps"] == full["steps"] == 9
    for key in ("final_train_loss", "heldout_accuracy", "heldout_auc", "heldout_accuracy_ci"):
        assert summary[key] == full[key], key
    (_, a, meta), (_, b, _) = (checkpoint.load_model(str(tmp_path / d), "rm")
                               for d in ("work", "full"))
    jax.tree_util.tree_map(np.testing.assert_array_equal, a, b)
    assert meta["step"] == 9 and meta["rm_progress"]["done"]


def test_verifyrm_config_is_the_paper_recipe():
    """configs/verifyrm.py: 16,384 examples per AdamW step (128 per device x 32 accumulation x 4
    processes in the reference) reached through micro-batches, 8,192 tokens, no character cut,
    no weight decay on biases and norms."""
    from conftest import repo_config

    c = repo_config("verifyrm")
    config_lib.validate(c, device_count=8)
    config_lib.validate_rm_train(c.rm_train)
    opts = c.rm_train
    assert opts.batch_size == 16384 == 128 * 32 * 4
    assert opts.batch_size % (8 * opts.micro_batches) == 0  # 8 devices: 2 rows each at a time
    fmt = input_format(c)
    assert fmt.max_len == 8192 and fmt.truncation_side == "right"
    assert (opts.char_cut, opts.overlong, opts.max_chars) == (False, "drop", 8000)
    assert (opts.weight_decay_mask, opts.weight_decay, opts.learning_rate) == (
        "no_bias_norm", 0.01, 2e-5)
    assert (opts.epochs, opts.schedule, opts.warmup_ratio, opts.grad_clip) == (
        3, "linear", 0.0, 1.0)
    # the CPU defaults stay small
    defaults = config_lib.rm_train_section()
    assert (defaults.batch_size, defaults.micro_batches, defaults.weight_decay_mask,
            defaults.char_cut) == (16, 1, "all", True)
