"""Text in, text out: completions of text prompts in fixed-shape batches (evaluation, RM
triples)."""
from __future__ import annotations

from typing import Sequence

import jax
import numpy as np

from coop_jax import models
from coop_jax.parallel import host
from coop_jax.hf.tokenizer import stop_token_ids
from coop_jax.sampling.batching import fixed_batches, tokenize_prompts
from coop_jax.sampling.engine import DEFAULT_SLOT_HALVINGS, check_engine, make_sampler
from coop_jax.sampling.sampler import SamplingConfig, decode_texts


def generate_texts(params, model_cfg: models.ModelConfig, tokenizer, prompts: Sequence[str], *,
                   max_prompt_len: int, max_new_tokens: int, temperature: float, top_p: float,
                   top_k: int, num_samples: int, batch_size: int, seed: int,
                   engine: str = "static", slots: int = 0,
                   slot_halvings: int = DEFAULT_SLOT_HALVINGS
                   ) -> tuple[list[list[str]], list[list[int]], list[list[bool]]]:
    """(texts [P][G], token lengths [P][G], truncated [P][G]); see `generate_completions`."""
    check_engine(engine)
    if isinstance(prompts, str):
        raise TypeError("prompts must be a list of strings, not one string")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not prompts:
        return [], [], []
    if model_cfg.is_reward_model:
        raise ValueError("generation needs a causal LM config (num_labels == 0), got a reward "
                         "model")
    scfg = SamplingConfig(
        max_new_tokens=max_new_tokens, eos_ids=stop_token_ids(tokenizer),
        pad_id=int(tokenizer.pad_token_id), temperature=float(temperature), top_k=int(top_k),
        top_p=float(top_p), num_samples=int(num_samples),
        valid_vocab=min(len(tokenizer), model_cfg.vocab_size))
    ids, mask = tokenize_prompts(tokenizer, list(prompts), max_prompt_len)
    mesh, hosts = host.mesh_of(params), jax.process_count()
    # a fixed shape for every batch (one compilation); with several processes each global batch
    # is split over the hosts, so the batches and their keys are those of one process
    bs = -(-min(batch_size, len(prompts)) // hosts) * hosts
    fn = make_sampler(model_cfg, scfg, engine, bs * scfg.num_samples, slots, slot_halvings)
    key = jax.random.key(seed)
    done = {}  # prompt index -> (texts, lengths, truncated) of this host's prompts
    g = scfg.num_samples
    for b, (idx, real) in enumerate(fixed_batches(np.arange(len(prompts)), bs)):
        block = host.row_block(bs // hosts)
        if mesh is None:
            batch = {"ids": ids[idx], "mask": mask[idx]}
        else:
            batch = host.global_batch({"ids": ids[idx[block]], "mask": mask[idx[block]]}, mesh)
        out = fn(params, batch["ids"], batch["mask"], jax.random.fold_in(key, b))
        out = jax.tree_util.tree_map(lambda x: host.local_rows(host.host_aligned(x)), out)
        decoded = decode_texts(tokenizer, out)
        for j, position in enumerate(range(block.start, block.stop)[:max(0, real - block.start)]):
            rows = slice(j * g, (j + 1) * g)
            done[int(idx[position])] = (decoded[rows], [int(x) for x in out.lengths[rows]],
                                        [bool(x) for x in out.truncated[rows]])
    merged = {int(i): v for part in host.gather_json(done) for i, v in part.items()}
    ordered = [merged[i] for i in range(len(prompts))]
    return ([t for t, _, _ in ordered], [n for _, n, _ in ordered],
            [u for _, _, u in ordered])


def generate_completions(params, model_cfg: models.ModelConfig, tokenizer, prompts: list[str], *,
                         max_prompt_len: int, max_new_tokens: int, temperature: float,
                         top_p: float = 1.0, top_k: int = 0, num_samples: int = 1,
                         batch_size: int = 64, seed: int = 0, engine: str = "static",
                         slots: int = 0, slot_halvings: int = DEFAULT_SLOT_HALVINGS,
                         ) -> tuple[list[list[str]], list[list[int]]]:
    """``num_samples`` completions per prompt and their token lengths (stop token included).

    ``temperature=0`` is greedy. Prompts are left-padded to ``max_prompt_len`` (longer ones keep
    their last tokens); every batch has ``min(batch_size, len(prompts))`` prompts, so the sampler
    compiles once per configuration. ``engine`` as ``rollout.engine``: "continuous" decodes each
    batch through ``slots`` continuous-batching slots (0: one per row; `sampling.engine`),
    halved at most ``slot_halvings`` times as the batch drains. The sampler runs the kernels
    ``model_cfg`` chose (`models.ModelConfig.with_kernels`).
    """
    texts, lengths, _ = generate_texts(
        params, model_cfg, tokenizer, prompts, max_prompt_len=max_prompt_len,
        max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
        num_samples=num_samples, batch_size=batch_size, seed=seed, engine=engine, slots=slots,
        slot_halvings=slot_halvings)
    return texts, lengths
