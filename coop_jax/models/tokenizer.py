"""The shipped character-level tokenizer for the embedded (offline) default.

Built with HF `tokenizers` and saved as `tokenizer.json` + `tokenizer_config.json`, so
`transformers.AutoTokenizer.from_pretrained(CHAR_TOKENIZER_DIR)` loads it like any real model's
tokenizer. Regenerate with `python -m coop_jax.models.tokenizer`.
"""
from __future__ import annotations

import json
import os
import string

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


def load_tokenizer(path: str | None = None):
    """The tokenizer of a local folder (default: the shipped character tokenizer).

    A folder whose tokenizer_config.json names the generic `PreTrainedTokenizerFast` is loaded
    as exactly that: transformers >= 5's AutoTokenizer would otherwise pick the model family's
    tokenizer class from config.json (e.g. Qwen2Tokenizer), whose pre-tokenizer drops the
    character tokenizer's spaces.
    """
    import transformers

    path = path or CHAR_TOKENIZER_DIR
    config_path = os.path.join(path, "tokenizer_config.json")
    if os.path.isfile(config_path):
        with open(config_path) as f:
            if json.load(f).get("tokenizer_class") == "PreTrainedTokenizerFast":
                return transformers.PreTrainedTokenizerFast.from_pretrained(path)
    return transformers.AutoTokenizer.from_pretrained(path)


if __name__ == "__main__":
    print(build_char_tokenizer())
