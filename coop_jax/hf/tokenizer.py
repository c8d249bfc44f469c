"""Tokenizers: loading (folder, .gguf file, Hub id), the stop tokens, the shipped char tokenizer.

The character-level tokenizer is the embedded (offline) default. It is built with HF `tokenizers`
and saved as `tokenizer.json` + `tokenizer_config.json`, so
`transformers.AutoTokenizer.from_pretrained(CHAR_TOKENIZER_DIR)` loads it like any real model's
tokenizer. Regenerate with `python -m coop_jax.hf.tokenizer`.
"""
from __future__ import annotations

import json
import logging
import os
import string

from coop_jax.hf.sources import local_folder

CHAR_TOKENIZER_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "assets",
                                  "char_tokenizer")
SPECIAL_TOKENS = ("<pad>", "<eos>", "<unk>", "<bos>")
CHARACTERS = "".join(c for c in string.printable if c.isprintable()) + "\n"  # 95 ASCII + newline


def build_char_tokenizer(out_dir: str = CHAR_TOKENIZER_DIR) -> str:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for c in CHARACTERS:
        vocab[c] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<pad>",
              "eos_token": "<eos>", "unk_token": "<unk>", "bos_token": "<bos>",
              "model_max_length": 4096, "padding_side": "left", "clean_up_tokenization_spaces": False}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return out_dir


# End-of-turn tokens of common chat models; each is a stop token when the vocabulary has it.
CHAT_STOP_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|eom_id|>")


def _generation_eos_ids(folder: str | None) -> list[int]:
    """`eos_token_id` (an int or a list) of the folder's generation_config.json, if any."""
    path = os.path.join(folder, "generation_config.json") if folder else ""
    if not path or not os.path.isfile(path):
        return []
    with open(path) as f:
        eos = json.load(f).get("eos_token_id")
    return [] if eos is None else [int(i) for i in (eos if isinstance(eos, list) else [eos])]


def stop_token_ids(tokenizer) -> tuple[int, ...]:
    """Every token that ends a generation: the tokenizer's EOS first, then the `eos_token_id`s of
    the model folder's generation_config.json, then known chat end-of-turn tokens in the
    vocabulary. Rollouts, evaluation, the rewriter and SFT targets all use this one set."""
    ids = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    ids += _generation_eos_ids(getattr(tokenizer, "name_or_path", None))
    vocab = tokenizer.get_vocab()
    ids += [int(vocab[t]) for t in CHAT_STOP_TOKENS if t in vocab]
    if not ids:
        raise ValueError("the tokenizer has no eos_token_id and no known end-of-turn token")
    return tuple(dict.fromkeys(ids))


def end_token_id(tokenizer) -> int:
    """The token a demonstration (SFT target) ends with: the first stop token."""
    return stop_token_ids(tokenizer)[0]


def _no_torch_notice(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("PyTorch was not found")


def load_tokenizer(path: str | None = None):
    """The tokenizer of a local folder, a `.gguf` file or a Hub id (default: the shipped
    character tokenizer). A `.gguf` file's tokenizer comes from its converted folder (see
    `coop_jax.hf.sources`), the same files `hf.load` and exports use.

    A folder whose tokenizer_config.json names the generic `PreTrainedTokenizerFast` is loaded
    as exactly that: transformers >= 5's AutoTokenizer would otherwise pick the model family's
    tokenizer class from config.json (e.g. Qwen2Tokenizer), whose pre-tokenizer drops the
    character tokenizer's spaces.
    """
    # transformers' import warns when torch is missing; tokenizers need no torch (addFilter
    # ignores a filter it already has)
    logging.getLogger("transformers").addFilter(_no_torch_notice)
    import transformers

    path = path or CHAR_TOKENIZER_DIR
    if not os.path.isdir(path):
        path = local_folder(path)
    config_path = os.path.join(path, "tokenizer_config.json")
    if os.path.isfile(config_path):
        with open(config_path) as f:
            if json.load(f).get("tokenizer_class") == "PreTrainedTokenizerFast":
                return transformers.PreTrainedTokenizerFast.from_pretrained(path)
    return transformers.AutoTokenizer.from_pretrained(path)


def prepare_tokenizer(tokenizer):
    """Give a tokenizer without a pad token (e.g. Llama's) its EOS as pad."""
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token is None:
            raise ValueError("the tokenizer has neither a pad token nor an EOS token to pad with")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


if __name__ == "__main__":
    print(build_char_tokenizer())
