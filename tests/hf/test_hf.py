"""HF interop: tiny random transformers models load into coop_jax with matching logits."""
import json
import subprocess
import sys

import jax
import numpy as np
import pytest

import torch  # noqa: E402  (the test extra installs the CPU build)
import transformers  # noqa: E402

from conftest import tiny_model_config  # noqa: E402
from coop_jax import hf  # noqa: E402

COMMON = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


def _save(model, path):
    model.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(**COMMON, tie_word_embeddings=True, rope_theta=10000.0)
    return _save(transformers.Qwen2ForCausalLM(cfg).eval(), tmp_path_factory.mktemp("qwen"))


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    torch.manual_seed(1)
    cfg = transformers.LlamaConfig(
        **(COMMON | {"max_position_embeddings": 256}), tie_word_embeddings=False,
        rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 32})
    return _save(transformers.LlamaForCausalLM(cfg).eval(), tmp_path_factory.mktemp("llama"))


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory):
    torch.manual_seed(2)
    cfg = transformers.Qwen2Config(**COMMON, num_labels=1, pad_token_id=0)
    return _save(transformers.Qwen2ForSequenceClassification(cfg).eval(),
                 tmp_path_factory.mktemp("rm"))


def _tokens(batch=3, length=12, seed=0):
    return np.random.default_rng(seed).integers(1, COMMON["vocab_size"], size=(batch, length))


def _torch_logits(path, tokens):
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    with torch.no_grad():
        return model(input_ids=torch.tensor(tokens)).logits.numpy()


@pytest.mark.parametrize("which", ["qwen_dir", "llama_dir"])
def test_causal_lm_parity_and_roundtrip(which, request, tmp_path):
    path = request.getfixturevalue(which)
    lm = hf.load(path, dtype="float32")
    tokens = _tokens()
    ref = _torch_logits(path, tokens)
    ours = np.asarray(lm.logits(tokens))
    assert ours.shape == ref.shape and ours.dtype == np.float32
    assert np.max(np.abs(ours - ref)) <= 1e-4
    if which == "llama_dir":
        assert lm.config.rope_scaling_dict["rope_type"] == "llama3"
        assert not lm.config.tie_embeddings
    out = tmp_path / "export"
    hf.save(lm, str(out))
    again = _torch_logits(str(out), tokens)
    assert np.max(np.abs(again - ref)) <= 1e-5


def test_llama_rope_scaling_matters(llama_dir):
    """Positions past original_max_position_embeddings differ with and without llama3 scaling."""
    lm = hf.load(llama_dir)
    tokens = _tokens(batch=1, length=48, seed=3)
    plain = hf.HFModel(lm.config.replace(rope_scaling=None), lm.params, lm.hf_config)
    ref = _torch_logits(llama_dir, tokens)
    scaled_err = np.max(np.abs(np.asarray(lm.logits(tokens)) - ref))
    plain_err = np.max(np.abs(np.asarray(plain.logits(tokens)) - ref))
    assert scaled_err <= 1e-5
    assert plain_err > 20 * scaled_err


def test_reward_model_parity_with_padding(rm_dir, tmp_path):
    lm = hf.load(rm_dir)
    assert lm.config.is_reward_model
    tokens = _tokens(batch=4, length=10, seed=4)
    mask = np.ones_like(tokens)
    for row, length in enumerate([10, 7, 3, 1]):
        mask[row, length:] = 0
        tokens[row, length:] = 0  # pad_token_id
    model = transformers.AutoModelForSequenceClassification.from_pretrained(rm_dir,
                                                                            dtype=torch.float32)
    with torch.no_grad():
        ref = model(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask)).logits
    ref = ref.numpy()[:, 0]
    ours = np.asarray(lm.scores(tokens, mask))
    assert ours.shape == (4,)
    assert np.max(np.abs(ours - ref)) <= 1e-4
    out = tmp_path / "rm_export"
    hf.save(lm, str(out))
    again = transformers.AutoModelForSequenceClassification.from_pretrained(str(out),
                                                                            dtype=torch.float32)
    with torch.no_grad():
        ref2 = again(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask)).logits
    assert np.max(np.abs(ref2.numpy()[:, 0] - ref)) <= 1e-5
    assert json.loads((out / "config.json").read_text())["architectures"] == [
        "Qwen2ForSequenceClassification"]


def test_check_cli(qwen_dir):
    out = subprocess.run([sys.executable, "-m", "coop_jax.hf", "check", qwen_dir],
                         capture_output=True, text=True, check=True, timeout=300)
    diff = float(out.stdout.split()[-1])
    assert diff <= 1e-4


def test_load_errors_name_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        hf.load(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ValueError, match="model_type"):
        hf.load(str(tmp_path))
    with pytest.raises(ValueError, match="dtype"):
        hf.load(str(tmp_path), dtype="float64")


def test_reward_model_from_causal_lm_keeps_first_layers(llama_dir, tmp_path):
    """num_labels=1 on a causal LM: LM head dropped, new N(0, 0.02^2) score head, first k layers."""
    rm = hf.load(llama_dir, num_labels=1, keep_layers=1, head_seed=3)
    assert rm.config.is_reward_model and rm.config.num_layers == 1
    assert "lm_head" not in rm.params and "layers_1" not in rm.params
    head = np.asarray(rm.params["score"]["kernel"])
    assert head.shape == (COMMON["hidden_size"], 1) and 0.005 < head.std() < 0.05
    again = hf.load(llama_dir, num_labels=1, keep_layers=1, head_seed=3)
    np.testing.assert_array_equal(np.asarray(again.params["score"]["kernel"]), head)
    lm = hf.load(llama_dir)
    np.testing.assert_array_equal(np.asarray(rm.params["layers_0"]["mlp"]["up_proj"]["kernel"]),
                                  np.asarray(lm.params["layers_0"]["mlp"]["up_proj"]["kernel"]))
    # The truncated model's hidden states are transformers' after one layer (+ final norm).
    tokens = _tokens(batch=2, length=9, seed=5)
    ref_model = transformers.AutoModelForCausalLM.from_pretrained(llama_dir, dtype=torch.float32)
    with torch.no_grad():
        hidden = ref_model.model(input_ids=torch.tensor(tokens), output_hidden_states=True)
        after_one = ref_model.model.norm(hidden.hidden_states[1]).numpy()
    expected = after_one[:, -1] @ head[:, 0]
    ours = np.asarray(rm.scores(tokens, np.ones_like(tokens)))
    assert np.max(np.abs(ours - expected)) <= 1e-4
    # Exported as a 1-layer sequence classifier that transformers reads back with our scores.
    out = tmp_path / "rm"
    hf.save(hf.from_params(rm.config, rm.params, pad_token_id=0), str(out))  # as coop-export
    saved = json.loads((out / "config.json").read_text())
    assert saved["architectures"] == ["LlamaForSequenceClassification"]
    assert saved["num_hidden_layers"] == 1
    clf = transformers.AutoModelForSequenceClassification.from_pretrained(str(out),
                                                                          dtype=torch.float32)
    with torch.no_grad():
        ref = clf(input_ids=torch.tensor(tokens)).logits.numpy()[:, 0]
    assert np.max(np.abs(ours - ref)) <= 1e-4


def test_scan_layers_load_and_export(qwen_dir, tmp_path):
    """scan_layers=True stacks the checkpoint's layers (same logits) and `save` unstacks them."""
    from coop_jax import models
    lm, scan = hf.load(qwen_dir), hf.load(qwen_dir, scan_layers=True, remat=True)
    assert scan.config.scan_layers and scan.config.remat and "layers" in scan.params
    tokens = _tokens()
    np.testing.assert_allclose(np.asarray(scan.logits(tokens)), np.asarray(lm.logits(tokens)),
                               atol=1e-5)
    hf.save(scan, str(tmp_path))
    again = hf.load(str(tmp_path))
    jax.tree_util.tree_map(np.testing.assert_array_equal, again.params, lm.params)
    with pytest.raises(ValueError, match="scan_layers"):
        hf.convert.params_to_hf(models.stack_layers(lm.params, lm.config.num_layers))


def test_export_leaves_out_the_kernel_choice():
    """config.json describes the model: the run's kernels (`ModelConfig.kernel_impl`) stay out."""
    cfg = tiny_model_config()
    exported = hf.convert.hf_config_from_model_config(cfg.with_kernels("reference"))
    assert exported == hf.convert.hf_config_from_model_config(cfg)
    assert not any("kernel" in key for key in exported)


def test_load_head_and_layer_errors(qwen_dir, rm_dir):
    with pytest.raises(ValueError, match="keep_layers"):
        hf.load(qwen_dir, keep_layers=3)
    with pytest.raises(ValueError, match="num_labels=1"):
        hf.load(rm_dir, num_labels=0)
    assert hf.load(rm_dir, num_labels=1).config.num_labels == 1


def test_hub_id_through_snapshot_download_stub(qwen_dir, monkeypatch, tmp_path):
    """A Hub id goes through huggingface_hub.snapshot_download (stubbed: no network)."""
    import shutil

    import huggingface_hub

    from coop_jax.hf.tokenizer import CHAR_TOKENIZER_DIR, load_tokenizer

    snap = tmp_path / "snapshot"
    shutil.copytree(qwen_dir, snap)
    shutil.copytree(CHAR_TOKENIZER_DIR, snap, dirs_exist_ok=True)
    calls = []

    def fake_snapshot(repo_id, **kw):
        calls.append((repo_id, kw))
        return str(snap)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot)
    lm = hf.load("acme/tiny-qwen")
    assert calls[0][0] == "acme/tiny-qwen" and "*.safetensors" in calls[0][1]["allow_patterns"]
    tokens = _tokens(batch=1, length=5)
    np.testing.assert_allclose(np.asarray(lm.logits(tokens)), _torch_logits(qwen_dir, tokens),
                               atol=1e-4)
    assert lm.source == str(snap)
    assert len(load_tokenizer("acme/tiny-qwen")) == len(load_tokenizer())
    assert [c[0] for c in calls] == ["acme/tiny-qwen"] * 2


def test_hub_id_offline_error_names_the_id(monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    def offline(repo_id, **kw):
        raise LocalEntryNotFoundError("offline")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(OSError, match="'Qwen/Qwen2.5-0.5B-Instruct'.*HF_HUB_OFFLINE"):
        hf.load("Qwen/Qwen2.5-0.5B-Instruct")
    with pytest.raises(FileNotFoundError, match="neither a local folder"):
        hf.load("/no/such/dir")


def test_stop_tokens_one_definition(tmp_path):
    """Tokenizer EOS, generation_config eos ids, then chat end-of-turn tokens; SFT ends on the
    first; evaluation re-exports the same function."""
    from tokenizers import Tokenizer, models as tok_models

    from coop_jax import eval as eval_lib
    from coop_jax.hf import tokenizer as tok_lib

    vocab = {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2, "a": 3, "<|eot_id|>": 4}
    Tokenizer(tok_models.WordLevel(vocab, unk_token="<|endoftext|>")).save(
        str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>"}))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [4, 2]}))
    tok = tok_lib.load_tokenizer(str(tmp_path))
    assert tok_lib.stop_token_ids(tok) == (2, 4, 0)
    assert tok_lib.end_token_id(tok) == 2
    assert eval_lib.stop_token_ids is tok_lib.stop_token_ids
    char = tok_lib.load_tokenizer()
    assert tok_lib.stop_token_ids(char) == (char.eos_token_id,)
