"""Chat clients: one reply per conversation, from an OpenAI-compatible endpoint or a local HF
causal LM sampled with coop_jax's sampler.

Used by Cooper's "rewrite" negatives (`coop_jax.rm.cooper`), by `coop-rephrase` and by the RM
trainer's assistant endpoint.
"""
from __future__ import annotations

import concurrent.futures
import json
import math
import urllib.request
from typing import Callable, Sequence

import jax
import numpy as np

from coop_jax import hf
from coop_jax.hf.tokenizer import stop_token_ids
from coop_jax.parallel import host
from coop_jax.sampling.batching import tokenize_prompts
from coop_jax.sampling.engine import DEFAULT_SLOT_HALVINGS, make_sampler
from coop_jax.sampling.sampler import SamplingConfig, decode_texts


def chat_completions_url(url: str) -> str:
    """`url` (the server root, /v1, or the full path) as the chat-completions endpoint."""
    endpoint = url.rstrip("/")
    if endpoint.endswith("/chat/completions"):
        return endpoint
    return (endpoint if endpoint.endswith("/v1") else endpoint + "/v1") + "/chat/completions"


def http_chat(url: str, model: str, temperature: float = 0.7, timeout_s: float = 120.0,
              top_p: float = 1.0, drop_truncated: bool = False, concurrency: int = 1
              ) -> Callable[[Sequence[tuple[list[dict], int]]], list[str | None]]:
    """An OpenAI-compatible chat-completions endpoint: `chat([(messages, max_tokens), ...])` gives
    one reply per request, None where the request failed (or, with `drop_truncated`, where the
    reply stopped at max_tokens); with `concurrency` > 1, that many requests are in flight at a
    time (threads), the replies in request order."""
    endpoint = chat_completions_url(url)

    def one(messages: list[dict], max_tokens: int) -> str | None:
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
        except (OSError, KeyError, IndexError, TypeError, ValueError):
            return None
        return None if drop_truncated and choice.get("finish_reason") == "length" else text

    def chat(requests: Sequence[tuple[list[dict], int]]) -> list[str | None]:
        if concurrency <= 1 or len(requests) <= 1:
            return [one(*r) for r in requests]
        with concurrent.futures.ThreadPoolExecutor(min(concurrency, len(requests))) as pool:
            return list(pool.map(lambda r: one(*r), requests))

    return chat


def chat_prompt(tokenizer, messages: list[dict]) -> str:
    """The tokenizer's chat template with a generation prompt; without one, the contents joined."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return "\n\n".join(m["content"] for m in messages) + "\n"


def rows_per_process(mesh, num_processes: int, batch_size: int) -> int:
    """Rows each process supplies to one sampler call of a mesh-sharded `local_chat` asked for
    `batch_size` rows in all: its share, rounded up so that the global batch (num_processes x
    these rows) divides over the mesh's batch axes (`host.row_sharding` shards it then)."""
    shards = int(np.prod([mesh.shape[a] for a in ("data", "fsdp") if a in mesh.shape]))
    unit = shards // math.gcd(shards, num_processes)
    share = -(-batch_size // num_processes)
    return -(-share // unit) * unit


def local_chat(hf_path: str, max_prompt_len: int, max_new_tokens: int,
               temperature: float = 0.7, seed: int = 0, top_p: float = 1.0,
               drop_truncated: bool = False, *, mesh=None, dtype: str = "float32",
               compute_dtype: str | None = None, scan_layers: bool = False,
               batch_size: int = 0, engine: str = "static", slots: int = 0,
               slot_halvings: int = DEFAULT_SLOT_HALVINGS
               ) -> Callable[[Sequence[list[dict]]], list[str | None]]:
    """Any local HF causal LM, sampled with coop_jax's sampler: `chat([messages, ...])` gives one
    reply per conversation (None where `drop_truncated` and no stop token came).

    The parameters are loaded in `dtype` (activations in `compute_dtype`, default `dtype`).
    Without a `mesh` they live on the default device and each call samples its conversations as
    one batch. With a `mesh` they are placed with their named shardings
    (`parallel.param_shardings`) and every call is one program over the whole mesh, so on
    several processes it is a collective: every process must call `chat` the same number of
    times (`chat.collective` is True then; a process with nothing to ask passes []). Each call
    gathers every process's conversations (`host.gather_json`); process i's rows are block i of
    a fixed-shape global batch (`batch_size` rows over all processes, rounded up to divide over
    the processes and the mesh's batch axes; 0: the largest process's count), each block padded
    with copies of a real conversation, so every process runs the same batches and gets its own
    replies back from its block. `chat(conversations, slots)` puts conversation j at row
    `slots[j]` of the block instead, in one call: a conversation that keeps its row (e.g. its
    prompt's index in the step's batch) gets the same sample whatever the other rows hold, and
    so whatever the number of processes.

    `engine`, `slots`, `slot_halvings` as `rollout.*`: "continuous" samples each call's rows
    through the continuous-batching engine (`slots` 0: one per row), each row from its own key.
    """
    lm = hf.load(hf_path, dtype=dtype, compute_dtype=compute_dtype, mesh=mesh,
                 scan_layers=scan_layers)
    tokenizer = lm.tokenizer()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    scfg = SamplingConfig(max_new_tokens=max_new_tokens, eos_ids=stop_token_ids(tokenizer),
                          pad_id=pad, temperature=temperature, top_p=top_p,
                          valid_vocab=min(len(tokenizer), lm.config.vocab_size))

    def sample(params, ids, mask, key):  # the engine's slots follow the call's rows
        return make_sampler(lm.config, scfg, engine, ids.shape[0], slots, slot_halvings)(
            params, ids, mask, key)
    calls = {"n": 0}
    hosts = jax.process_count()

    def generate(ids, mask) -> list[str | None]:
        """One sampler call (a fresh key each): this process's rows' replies."""
        calls["n"] += 1
        key = jax.random.key(seed * 100003 + calls["n"])
        if mesh is None:
            out = sample(lm.params, ids, mask, key)
            tokens, done, truncated = out.tokens, out.mask, out.truncated
        else:
            batch = host.global_batch({"ids": ids, "mask": mask}, mesh)
            out = sample(lm.params, batch["ids"], batch["mask"], key)
            tokens, done, truncated = (host.local_rows(host.host_aligned(x))
                                       for x in (out.tokens, out.mask, out.truncated))
        texts = decode_texts(tokenizer, out._replace(tokens=tokens, mask=done))
        if drop_truncated:
            texts = [None if t else x for x, t in zip(texts, np.asarray(truncated))]
        return texts

    def tokenize(conversations):
        return tokenize_prompts(tokenizer, [chat_prompt(tokenizer, m) for m in conversations],
                                max_prompt_len)

    def chat(conversations: Sequence[list[dict]], slots: Sequence[int] | None = None
             ) -> list[str | None]:
        conversations = list(conversations)
        if mesh is None:
            return generate(*tokenize(conversations)) if conversations else []
        everyone = host.gather_json(conversations) if hosts > 1 else [conversations]
        most = max(len(c) for c in everyone)
        if not most:
            return []
        block = rows_per_process(mesh, hosts, batch_size or most * hosts)
        filler = conversations[0] if conversations else next(c[0] for c in everyone if c)
        if slots is not None:  # each conversation at its own row of this host's block
            slots = list(slots)
            if len(slots) != len(conversations) or any(not 0 <= i < block for i in slots):
                raise ValueError(f"slots must give each conversation a row in [0, {block})")
            rows = [filler] * block
            for conversation, i in zip(conversations, slots):
                rows[i] = conversation
            replies = generate(*tokenize(rows))
            return [replies[i] for i in slots]
        replies: list[str | None] = []
        for start in range(0, most, block):
            rows = conversations[start:start + block]
            ids, mask = tokenize(rows + [filler] * (block - len(rows)))
            replies += generate(ids, mask)[:len(rows)]
        return replies

    chat.collective = mesh is not None and hosts > 1
    return chat
