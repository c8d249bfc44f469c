"""The sampler's host-side input: left-padded prompt tokens and fixed-shape batches."""
from __future__ import annotations

import inspect
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)


def _encode(tokenizer: Any, text: str, add_special_tokens: bool) -> list[int]:
    encode = tokenizer.encode
    try:
        params = inspect.signature(encode).parameters
    except (TypeError, ValueError):
        params = {}
    takes_flag = "add_special_tokens" in params or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    ids = encode(text, add_special_tokens=add_special_tokens) if takes_flag else encode(text)
    return [int(t) for t in ids]


def tokenize_prompts(tokenizer: Any, prompts: list[str], max_len: int, *,
                     add_special_tokens: bool = False, return_num_truncated: bool = False):
    """Left-padded ``(ids int32 [B, max_len], mask bool [B, max_len])``.

    Pads with ``tokenizer.pad_token_id``. A prompt longer than ``max_len`` tokens keeps its LAST
    ``max_len`` tokens (the question's end and the generation prompt survive); the number of such
    prompts is logged, and returned third when ``return_num_truncated``. ``add_special_tokens``
    defaults to False because chat-templated prompts already hold the special tokens.
    """
    if isinstance(max_len, bool) or not isinstance(max_len, (int, np.integer)) or max_len < 1:
        raise ValueError(f"max_len must be an int >= 1, got {max_len!r}")
    max_len = int(max_len)
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is None:
        raise ValueError("tokenizer.pad_token_id is None; set a pad token before tokenizing")
    if isinstance(prompts, str):
        raise TypeError("prompts must be a list of strings, not one string")
    ids = np.full((len(prompts), max_len), int(pad), dtype=np.int32)
    mask = np.zeros((len(prompts), max_len), dtype=np.bool_)
    truncated = 0
    for row, prompt in enumerate(prompts):
        toks = _encode(tokenizer, prompt, add_special_tokens)
        if not toks:
            raise ValueError(f"prompts[{row}] encodes to zero tokens")
        if len(toks) > max_len:
            truncated += 1
            toks = toks[-max_len:]
        ids[row, max_len - len(toks):] = toks
        mask[row, max_len - len(toks):] = True
    if truncated:
        logger.warning("tokenize_prompts: %d of %d prompts exceeded max_len=%d and were "
                       "truncated on the left", truncated, len(prompts), max_len)
    return (ids, mask, truncated) if return_num_truncated else (ids, mask)


def fixed_batches(indices: Sequence[int] | np.ndarray, batch_size: int
                  ) -> Iterator[tuple[np.ndarray, int]]:
    """(index array of exactly `batch_size`, number of real rows) over `indices` in order: the
    last batch is filled by repeating its first index, so every batch has one compiled shape."""
    indices = np.asarray(indices)
    for start in range(0, len(indices), batch_size):
        idx = indices[start:start + batch_size]
        yield np.concatenate([idx, np.full(batch_size - len(idx), idx[0])]), len(idx)
