"""Every model family against transformers: the check that "adding a family" needs.

Adding a family is one `MODEL_FAMILIES.register(...)` entry in coop_jax/models/families.py; the
parity test below then runs it with no new test code: a tiny random transformers model of the
family's `hf_model_type` (built locally, nothing downloaded) must give coop_jax's logits after
`hf.load`, export through `hf.save` (with and without the source config.json) to a folder that
transformers loads without missing or unexpected tensors and with the same logits, and export as
a reward model under the family's classifier name. `TOY_FAMILIES` shows the recipe: a "mistral"
entry registered by this file alone (Mistral is Llama without biases, plus sliding-window
attention, which the entry refuses).
"""
import json
import re

import numpy as np
import pytest
import torch
import transformers

from coop_jax import hf
from coop_jax.hf.convert import model_config_from_hf
from coop_jax.models import MODEL_FAMILIES, ModelConfig, ModelFamily

TINY = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
            rope_theta=10000.0, pad_token_id=0)

# Registered only while a test uses it (the `family` fixture): the recipe, not a shipped family.
TOY_FAMILIES = {
    "mistral": ModelFamily(hf_model_type="mistral", hf_prefix="Mistral",
                           unsupported=("use_sliding_window", "sliding_window")),
}
FAMILIES = [*MODEL_FAMILIES, *TOY_FAMILIES]


@pytest.fixture
def family(request):
    name = request.param
    if name in TOY_FAMILIES:
        MODEL_FAMILIES.register(name, TOY_FAMILIES[name], doc="test-only (tests/"
                                "test_model_families.py)")
        yield name
        MODEL_FAMILIES.unregister(name)
    else:
        yield name


def _bias_keys(entry: ModelFamily) -> list[str]:
    """The bias keys of HF configs (those of transformers' Llama and the entry's own): turned on,
    a family must follow them exactly where transformers does and ignore them where it does not."""
    own = {getattr(entry, s) for s in ("qkv_bias", "o_bias", "mlp_bias")}
    return sorted({"attention_bias", "mlp_bias"} | {k for k in own if isinstance(k, str)})


def _tiny_hf_model(entry: ModelFamily, variant: str, seed: int):
    """A random transformers causal LM of `entry`'s model_type; biases and norm weights are drawn
    too (transformers initialises them to 0 and 1, which would hide a dropped tensor)."""
    if variant == "tied":
        extra = {"tie_word_embeddings": True}
    else:  # untied, with every bias key turned on
        extra = {"tie_word_embeddings": False} | {key: True for key in _bias_keys(entry)}
    config = transformers.AutoConfig.for_model(entry.hf_model_type, **TINY, **extra)
    for key in entry.unsupported:  # the features the decoder lacks (on by default): off
        if getattr(config, key, None):
            setattr(config, key, False if getattr(config, key) is True else None)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0.0, 0.5)
            elif "norm" in name:
                p.uniform_(0.5, 1.5)
    return model


def _tokens(batch=3, length=12, seed=0):
    return np.random.default_rng(seed).integers(1, TINY["vocab_size"], size=(batch, length))


def _load_torch(path, cls=transformers.AutoModelForCausalLM):
    model, info = cls.from_pretrained(str(path), dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    return model.eval()


def _torch_logits(model, tokens):
    with torch.no_grad():
        return model(input_ids=torch.tensor(tokens)).logits.numpy()


@pytest.mark.parametrize("variant", ["tied", "untied_biases"])
@pytest.mark.parametrize("family", FAMILIES, indirect=True)
def test_family_parity_and_export_roundtrip(family, variant, tmp_path):
    entry = MODEL_FAMILIES.lookup(family)
    model = _tiny_hf_model(entry, variant, seed=FAMILIES.index(family))
    model.save_pretrained(tmp_path / "hf")
    tokens = _tokens()
    ref = _torch_logits(model, tokens)

    lm = hf.load(str(tmp_path / "hf"))
    assert lm.config.family == family
    state = model.state_dict()  # the family's switches are transformers' architecture
    assert lm.config.qkv_bias == ("model.layers.0.self_attn.q_proj.bias" in state)
    assert lm.config.o_bias == ("model.layers.0.self_attn.o_proj.bias" in state)
    assert lm.config.mlp_bias == ("model.layers.0.mlp.gate_proj.bias" in state)
    assert lm.config.tie_embeddings == (variant == "tied")
    assert np.max(np.abs(np.asarray(lm.logits(tokens)) - ref)) <= 1e-4

    # Export, keeping the source config.json's other fields and from our fields alone.
    for name, exported in (("save", lm), ("from_params", hf.from_params(lm.config, lm.params))):
        hf.save(exported, str(tmp_path / name))
        saved = json.loads((tmp_path / name / "config.json").read_text())
        assert saved["model_type"] == entry.hf_model_type == model.config.model_type
        assert saved["architectures"] == [entry.architecture(False)] == [type(model).__name__]
        again = _torch_logits(_load_torch(tmp_path / name), tokens)
        assert np.max(np.abs(again - ref)) <= 1e-5
        reloaded = hf.load(str(tmp_path / name))  # export writes head_dim explicitly
        assert reloaded.config == lm.config.replace(head_dim=lm.config.dim_per_head)

    # The same family as a reward model: a new scalar head, exported under the classifier name.
    rm = hf.load(str(tmp_path / "hf"), num_labels=1)
    hf.save(rm, str(tmp_path / "rm"))
    saved = json.loads((tmp_path / "rm" / "config.json").read_text())
    clf = _load_torch(tmp_path / "rm", transformers.AutoModelForSequenceClassification)
    assert saved["architectures"] == [entry.architecture(True)] == [type(clf).__name__]
    with torch.no_grad():
        ref_scores = clf(input_ids=torch.tensor(tokens)).logits.numpy()[:, 0]
    assert np.max(np.abs(np.asarray(rm.scores(tokens)) - ref_scores)) <= 1e-4


@pytest.mark.parametrize("family", FAMILIES, indirect=True)
def test_entry_names_are_transformers_names(family):
    entry = MODEL_FAMILIES.lookup(family)
    assert entry.hf_model_type in transformers.CONFIG_MAPPING
    for is_rm in (False, True):
        assert hasattr(transformers, entry.architecture(is_rm))
    assert MODEL_FAMILIES.describe()[family]


@pytest.mark.parametrize("family", ["mistral"], indirect=True)
def test_unknown_and_refused_configs_name_the_field(family):
    hf_cfg = dict(TINY, num_hidden_layers=1, architectures=["MistralForCausalLM"],
                  model_type="mistral")
    assert model_config_from_hf(hf_cfg).family == "mistral"
    with pytest.raises(ValueError, match=r"config.json sliding_window=4096 is not supported"):
        model_config_from_hf(hf_cfg | {"sliding_window": 4096})
    with pytest.raises(ValueError, match=r"model_type must be one of \(.*'mistral'\), got 'gpt2'"):
        model_config_from_hf(hf_cfg | {"model_type": "gpt2"})


def test_registry_errors_and_shipped_entries():
    assert {"qwen2", "llama"} <= set(MODEL_FAMILIES)
    with pytest.raises(ValueError, match=r"ModelConfig.family='gpt2' is not one of"):
        ModelConfig(96, 32, 64, 1, 4, 2, family="gpt2")
    with pytest.raises(ValueError, match=re.escape(
            f"config.model.family must be one of {sorted(MODEL_FAMILIES)}, got 'gpt2'")):
        MODEL_FAMILIES.check("gpt2")
    qwen = dict(TINY, num_hidden_layers=1, model_type="qwen2", architectures=["Qwen2ForCausalLM"])
    with pytest.raises(ValueError, match="use_sliding_window=true is not supported"):
        model_config_from_hf(qwen | {"use_sliding_window": True})
    # qwen2 fixes its biases (transformers' Qwen2 has q/k/v bias only, whatever config.json says)
    cfg = model_config_from_hf(qwen | {"attention_bias": False, "mlp_bias": True})
    assert (cfg.qkv_bias, cfg.o_bias, cfg.mlp_bias) == (True, False, False)
    # llama's attention_bias is one key for q/k/v and o: exported from qkv_bias
    llama = MODEL_FAMILIES["llama"]
    assert llama.hf_keys(cfg.replace(family="llama")) == {"attention_bias": True,
                                                          "mlp_bias": False}
    assert MODEL_FAMILIES["qwen2"].hf_keys(cfg) == {}
