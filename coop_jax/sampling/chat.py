"""Chat clients: one reply per conversation, from an OpenAI-compatible endpoint or a local HF
causal LM sampled with coop_jax's sampler.

Used by Cooper's "rewrite" negatives (`coop_jax.cooper`), by `coop-rephrase` and by the RM
trainer's assistant endpoint.
"""
from __future__ import annotations

import json
import urllib.request
from typing import Callable, Sequence

import jax
import numpy as np

from coop_jax import hf
from coop_jax.models.tokenizer import stop_token_ids
from coop_jax.sampling.batching import tokenize_prompts
from coop_jax.sampling.sampler import SamplingConfig, decode_texts, make


def chat_completions_url(url: str) -> str:
    """`url` (the server root, /v1, or the full path) as the chat-completions endpoint."""
    endpoint = url.rstrip("/")
    if endpoint.endswith("/chat/completions"):
        return endpoint
    return (endpoint if endpoint.endswith("/v1") else endpoint + "/v1") + "/chat/completions"


def http_chat(url: str, model: str, temperature: float = 0.7, timeout_s: float = 120.0,
              top_p: float = 1.0, drop_truncated: bool = False
              ) -> Callable[[Sequence[tuple[list[dict], int]]], list[str | None]]:
    """An OpenAI-compatible chat-completions endpoint: `chat([(messages, max_tokens), ...])` gives
    one reply per request, None where the request failed (or, with `drop_truncated`, where the
    reply stopped at max_tokens)."""
    endpoint = chat_completions_url(url)

    def chat(requests: Sequence[tuple[list[dict], int]]) -> list[str | None]:
        out = []
        for messages, max_tokens in requests:
            body = {"model": model, "temperature": temperature, "max_tokens": max_tokens,
                    "messages": messages}
            if top_p < 1.0:
                body["top_p"] = top_p
            request = urllib.request.Request(endpoint, data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=timeout_s) as response:
                    choice = json.load(response)["choices"][0]
                text = choice["message"]["content"]
                if drop_truncated and choice.get("finish_reason") == "length":
                    text = None
                out.append(text)
            except (OSError, KeyError, IndexError, TypeError, ValueError):
                out.append(None)
        return out

    return chat


def chat_prompt(tokenizer, messages: list[dict]) -> str:
    """The tokenizer's chat template with a generation prompt; without one, the contents joined."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return "\n\n".join(m["content"] for m in messages) + "\n"


def local_chat(hf_path: str, max_prompt_len: int, max_new_tokens: int,
               temperature: float = 0.7, seed: int = 0, top_p: float = 1.0,
               drop_truncated: bool = False
               ) -> Callable[[Sequence[list[dict]]], list[str | None]]:
    """Any local HF causal LM, sampled with coop_jax's sampler: `chat([messages, ...])` gives one
    reply per conversation (None where `drop_truncated` and no stop token came)."""
    lm = hf.load(hf_path)
    tokenizer = lm.tokenizer()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    scfg = SamplingConfig(max_new_tokens=max_new_tokens, eos_ids=stop_token_ids(tokenizer),
                          pad_id=pad, temperature=temperature, top_p=top_p,
                          valid_vocab=min(len(tokenizer), lm.config.vocab_size))
    sample = make(lm.config, scfg)
    calls = {"n": 0}

    def chat(conversations: Sequence[list[dict]]) -> list[str | None]:
        if not conversations:
            return []
        ids, mask = tokenize_prompts(tokenizer, [chat_prompt(tokenizer, m)
                                                 for m in conversations], max_prompt_len)
        calls["n"] += 1
        out = sample(lm.params, ids, mask, jax.random.key(seed * 100003 + calls["n"]))
        texts = decode_texts(tokenizer, out)
        if drop_truncated:
            texts = [None if t else x for x, t in zip(texts, np.asarray(out.truncated))]
        return texts

    return chat
