"""GGUF files -> normal Hugging Face folders, through transformers + `gguf` (no dequantiser here).

transformers dequantises a GGUF checkpoint into a float model and builds the tokenizer (with its
chat template) from the file's metadata. It refuses `save_pretrained` while
`config.quantization_config` marks the model as GGUF-quantised; the weights are plain floats by
then, so dropping that mark and the quantizer writes an ordinary float32 checkpoint.
"""
from __future__ import annotations

import os


def load_transformers(gguf_path: str):
    """(float32 transformers causal LM, tokenizer) of a GGUF file."""
    import torch
    import transformers

    folder, name = os.path.split(os.path.abspath(gguf_path))
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name,
                                                                  dtype=torch.float32)
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    except ImportError as e:
        raise ImportError(f"loading {gguf_path!r} needs the `gguf` and `accelerate` packages "
                          f"(pip install gguf accelerate): {e}") from e
    return model, tokenizer


def convert(gguf_path: str, out_dir: str) -> str:
    """Write `gguf_path` as an HF folder: config.json, model.safetensors, generation_config.json,
    tokenizer files and the chat template. Returns `out_dir`."""
    model, tokenizer = load_transformers(gguf_path)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.config.name_or_path = ""
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir
