"""The reference-based reward model's input (Cooper's VerifyRM format, docs/ALGORITHMS.md) and its
labelled (question, reference, completion, label) triples.

`RMInputFormat` is the one way every RM input is built (coop-train's rollouts and Cooper pairs,
coop-train-rm, held-out and coop-eval accuracy): the `<question>` text by `question_format`, the
tagged text by `format_rm_input`, the tokens by `tokenize_rm_inputs` with `truncation_side`.
Triples files keep the raw question; the format is applied here.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Callable, Sequence

import numpy as np

from coop_jax.data.templates import PROMPT_TEMPLATES, format_prompt
from coop_jax.jsonl import read_jsonl

MAX_CHARS, HEAD_CHARS, TAIL_CHARS = 1500, 500, 1000
TRIPLE_KEYS = ("question", "reference", "completion", "label")


def truncate_middle(text: str) -> str:
    """Texts over 1,500 characters keep their first 500 and last 1,000 characters."""
    return text if len(text) <= MAX_CHARS else text[:HEAD_CHARS] + text[-TAIL_CHARS:]


def format_rm_input(question: str, reference: str, completion: str, char_cut: bool = True
                    ) -> str:
    """No chat template and no special tokens: the three tagged fields, in this order; the
    reference and the completion `truncate_middle`d (the RL-time input) unless not `char_cut`
    (whole texts, as the VerifyRM reference trains)."""
    cut = truncate_middle if char_cut else (lambda text: text)
    return (f"<question>{question}</question>\n"
            f"<reference_answer>{cut(reference)}</reference_answer>\n"
            f"<completion>{cut(completion)}</completion>")


# rm.question_format: the RM's <question> text from (raw question, prompt template)
QUESTION_FORMATS: dict[str, Callable[[str, str], str]] = {
    # the reference (ZJU-REAL/cooper fsdp_workers.py passes the user turn's content): the
    # template's instruction suffix included, no chat wrapping
    "prompt": lambda question, template: format_prompt(template, question),
    "question": lambda question, template: question,  # the raw question
}
# rm.truncation_side: which side of an input over max_len tokens is cut (HF's naming).
# The score is read at the last token: "left" keeps the tail, so the completion's final answer
# survives and the question / reference lose their start; "right" (the reference, verl's
# truncation="right") keeps the head, so the completion's end, its final answer, is cut.
TRUNCATIONS: dict[str, Callable[[list, int], list]] = {
    "left": lambda toks, n: toks[-n:],
    "right": lambda toks, n: toks[:n],
}


def _one_of(value: str, registry: dict, field: str) -> None:
    if value not in registry:
        raise ValueError(f"config.reward_model.{field} must be one of {list(registry)}, got "
                         f"{value!r}")


def rm_question(question: str, template: str, question_format: str = "prompt") -> str:
    """The RM's `<question>` text: `QUESTION_FORMATS[question_format]` of the raw question."""
    _one_of(question_format, QUESTION_FORMATS, "question_format")
    return QUESTION_FORMATS[question_format](question, template)


def tokenize_rm_inputs(tokenizer, texts: list[str], max_len: int, truncation_side: str = "left"
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded token ids [B, max_len] and mask; an over-long input loses its start
    (`truncation_side="left"`, so the completion's end, where the score is read, survives) or its
    end ("right", as the reference)."""
    _one_of(truncation_side, TRUNCATIONS, "truncation_side")
    cut = TRUNCATIONS[truncation_side]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = np.full((len(texts), max_len), pad, np.int32)
    mask = np.zeros((len(texts), max_len), bool)
    for i, text in enumerate(texts):
        toks = cut(tokenizer(text, add_special_tokens=False)["input_ids"], max_len)
        ids[i, :len(toks)] = toks
        mask[i, :len(toks)] = True
    return ids, mask


@dataclasses.dataclass(frozen=True)
class RMInputFormat:
    """How (question, reference, completion) becomes the RM's tokens: `max_len` tokens, the
    `<question>` by `question_format` with prompt `template`, over-long inputs cut on
    `truncation_side`; `char_cut=False` keeps whole references and completions (coop-train-rm's
    `rm_train.char_cut`; every RL-time input has the cut)."""
    max_len: int
    template: str
    question_format: str = "prompt"
    truncation_side: str = "left"
    char_cut: bool = True

    def __post_init__(self):
        _one_of(self.question_format, QUESTION_FORMATS, "question_format")
        _one_of(self.truncation_side, TRUNCATIONS, "truncation_side")
        if self.template not in PROMPT_TEMPLATES:
            raise ValueError(f"unknown prompt template {self.template!r} for the RM's question; "
                             f"allowed: {sorted(PROMPT_TEMPLATES)}")
        if self.max_len < 1:
            raise ValueError(f"the RM's max_len must be >= 1, got {self.max_len}")

    @classmethod
    def from_config(cls, config, *, max_len: int = 0, template: str = "") -> "RMInputFormat":
        """The run's RM input: `rm.question_format` / `truncation_side`, the prompt template
        `template` or `data.prompt_template`, `max_len` or `rm.max_len` tokens."""
        rm = config.rm
        return cls(max_len=max_len or rm.max_len,
                   template=template or config.data.prompt_template,
                   question_format=rm.question_format, truncation_side=rm.truncation_side)

    def text(self, question: str, reference: str, completion: str) -> str:
        return format_rm_input(rm_question(question, self.template, self.question_format),
                               reference, completion, self.char_cut)

    def texts(self, triples: Sequence[dict]) -> list[str]:
        return [self.text(t["question"], t["reference"], t["completion"]) for t in triples]

    def tokenize(self, tokenizer, rows: Sequence[tuple[str, str, str]]
                 ) -> tuple[np.ndarray, np.ndarray]:
        """Token ids and mask [len(rows), max_len] of (question, reference, completion) rows."""
        return tokenize_rm_inputs(tokenizer, [self.text(*r) for r in rows], self.max_len,
                                  self.truncation_side)

    def tokenize_triples(self, tokenizer, triples: Sequence[dict]
                         ) -> tuple[np.ndarray, np.ndarray]:
        return tokenize_rm_inputs(tokenizer, self.texts(triples), self.max_len,
                                  self.truncation_side)


def trained_input_format(saved_config: dict) -> dict:
    """The RM input settings a checkpoint's saved config records (its `rm` section; saved before
    0.2, `cooper.max_len` and `reward_model.question_format` / `truncation_side`). RMs saved
    before `question_format` / `truncation_side` existed read raw questions and kept the tail."""
    rm, data = saved_config.get("rm", {}), saved_config.get("data", {})
    old_rm, old_cooper = saved_config.get("reward_model", {}), saved_config.get("cooper", {})
    return {"max_len": rm.get("max_len", old_cooper.get("max_len")),
            "template": data.get("prompt_template"),
            "question_format": rm.get("question_format",
                                      old_rm.get("question_format", "question")),
            "truncation_side": rm.get("truncation_side", old_rm.get("truncation_side", "left"))}


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


# ---------------------------------------------------------------------- a shared prefix
def shared_prefix_lengths(tokens: np.ndarray, mask: np.ndarray, group_size: int) -> np.ndarray:
    """[R / G] how many leading tokens every row of each group of `group_size` consecutive
    right-padded RM inputs has in common (the tokens of its question and reference, and whatever
    its completions share), capped so that every row keeps at least one token of its own (the
    score is read at its last). Rows with no valid token do not constrain their group."""
    tokens, mask = np.asarray(tokens), np.asarray(mask).astype(bool)
    rows, width = tokens.shape
    groups = tokens.reshape(rows // group_size, group_size, width)
    valid = mask.reshape(groups.shape)
    used = valid.any(axis=2)  # [groups, G] rows that hold an input
    first = np.take_along_axis(groups, used.argmax(axis=1)[:, None, None], axis=1)
    agree = ((groups == first) & valid) | ~used[:, :, None]
    common = np.where(agree.all(axis=1).all(axis=1), width, agree.all(axis=1).argmin(axis=1))
    shortest = np.where(used, valid.sum(axis=2), width).min(axis=1)
    return np.maximum(np.minimum(common, shortest - 1), 0).astype(np.int32)


def split_at(tokens: np.ndarray, mask: np.ndarray, lengths: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Right-padded rows [R, L] cut after `lengths` [R] tokens (at most a row's own length):
    (prefix, its mask) left-padded and (suffix, its mask) right-padded, each [R, L], so that
    [prefix | suffix] holds the row's valid tokens in order, as the prompt and the response of a
    policy row do."""
    tokens, mask = np.asarray(tokens), np.asarray(mask).astype(bool)
    rows, width = tokens.shape
    own = mask.sum(axis=1)
    cut = np.minimum(np.asarray(lengths), own)
    col = np.arange(width)
    prefix_mask = col >= (width - cut)[:, None]
    prefix_src = np.clip(col - (width - cut)[:, None], 0, width - 1)
    suffix_mask = col < (own - cut)[:, None]
    suffix_src = np.clip(col + cut[:, None], 0, width - 1)
    take = lambda src, keep: np.where(keep, np.take_along_axis(tokens, src, axis=1), 0)
    return (take(prefix_src, prefix_mask).astype(tokens.dtype), prefix_mask,
            take(suffix_src, suffix_mask).astype(tokens.dtype), suffix_mask)


def split_groups(tokens: np.ndarray, mask: np.ndarray, group_size: int,
                 lengths: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`split_at` of groups of `group_size` consecutive rows after their group's shared prefix
    (`lengths` [R / G], default `shared_prefix_lengths`); every row of a group carries the
    group's prefix, taken from its first row with an input."""
    rows, width = np.shape(tokens)
    lengths = shared_prefix_lengths(tokens, mask, group_size) if lengths is None else lengths
    prefix, prefix_mask, suffix, suffix_mask = split_at(tokens, mask,
                                                        np.repeat(lengths, group_size))
    first = np.asarray(mask).reshape(-1, group_size, width).any(axis=2).argmax(axis=1)
    rep = np.repeat(np.arange(rows // group_size) * group_size + first, group_size)
    return prefix[rep], prefix_mask[rep], suffix, suffix_mask
