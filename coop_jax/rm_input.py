"""The reference-based reward model's input (Cooper's VerifyRM format, docs/ALGORITHMS.md) and its
labelled (question, reference, completion, label) triples."""
from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np

from coop_jax.jsonl import read_jsonl

MAX_CHARS, HEAD_CHARS, TAIL_CHARS = 1500, 500, 1000
TRIPLE_KEYS = ("question", "reference", "completion", "label")


def truncate_middle(text: str) -> str:
    """Texts over 1,500 characters keep their first 500 and last 1,000 characters."""
    return text if len(text) <= MAX_CHARS else text[:HEAD_CHARS] + text[-TAIL_CHARS:]


def format_rm_input(question: str, reference: str, completion: str) -> str:
    """No chat template and no special tokens: the three tagged fields, in this order."""
    return (f"<question>{question}</question>\n"
            f"<reference_answer>{truncate_middle(reference)}</reference_answer>\n"
            f"<completion>{truncate_middle(completion)}</completion>")


def tokenize_rm_inputs(tokenizer, texts: list[str], max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded token ids [B, max_len] and mask; an over-long input keeps its last tokens so
    the completion's end (where the score is read) survives."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = np.full((len(texts), max_len), pad, np.int32)
    mask = np.zeros((len(texts), max_len), bool)
    for i, text in enumerate(texts):
        toks = tokenizer(text, add_special_tokens=False)["input_ids"][-max_len:]
        ids[i, :len(toks)] = toks
        mask[i, :len(toks)] = True
    return ids, mask


def _label(value, i: int) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer, float)) and value in (0, 1):
        return bool(value)
    raise ValueError(f"triples[{i}]['label'] must be a bool or 0/1, got {value!r}")


def check_triples(triples: Sequence[dict]) -> list[bool]:
    """Validate ``{question, reference, completion, label}`` dicts; returns the labels."""
    if not triples:
        raise ValueError("triples is empty")
    labels = []
    for i, t in enumerate(triples):
        if not isinstance(t, dict):
            raise ValueError(f"triples[{i}] must be a dict, got {type(t).__name__}")
        for key in ("question", "reference", "completion"):
            if not isinstance(t.get(key), str):
                raise ValueError(f"triples[{i}]['{key}'] must be a string, got {t.get(key)!r}")
        if "label" not in t:
            raise ValueError(f"triples[{i}] has no 'label'")
        labels.append(_label(t["label"], i))
    return labels


def read_triples(path: str) -> list[dict]:
    """JSONL triples; a line that is not a JSON object is an error naming the line."""
    triples = read_jsonl(path)
    if not triples:
        raise ValueError(f"{path} holds no triples")
    check_triples(triples)
    return triples


def write_triples(path: str, triples: Sequence[dict]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for t in triples:
            fh.write(json.dumps({k: t[k] for k in TRIPLE_KEYS}) + "\n")
