"""Supervised warm start on reference solutions (prompt -> solution + EOS), so RL begins from a
policy that sometimes succeeds."""
from __future__ import annotations

import dataclasses
import logging

import jax
import jax.numpy as jnp
import numpy as np

from coop_jax import models
from coop_jax.data import format_prompt
from coop_jax.sampling import tokenize_prompts
from coop_jax.models.logprobs import response_logprobs
from coop_jax.hf.tokenizer import end_token_id
from coop_jax.parallel import host
from coop_jax.optim import ModelState, gradient_step, make_optimizer

log = logging.getLogger("coop_jax")


def tokenize_responses(tokenizer, texts: list[str], max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded response ids [B, max_len] ending in EOS (over-long texts are cut)."""
    ids = np.full((len(texts), max_len), tokenizer.pad_token_id, np.int32)
    mask = np.zeros((len(texts), max_len), bool)
    for i, text in enumerate(texts):
        toks = tokenizer(text, add_special_tokens=False)["input_ids"][:max_len - 1]
        toks = toks + [end_token_id(tokenizer)]
        ids[i, :len(toks)], mask[i, :len(toks)] = toks, True
    return ids, mask


def corrupt_final_answer(solution: str, reference: str) -> str:
    """The solution with its final integer answer off by one (the last occurrence is replaced)."""
    at = solution.rfind(reference)
    if at < 0 or not reference.lstrip("-").isdigit():
        return solution
    return solution[:at] + str(int(reference) + 1) + solution[at + len(reference):]


def warm_start(params, cfg: models.ModelConfig, tokenizer, records: list[dict], *, template: str,
               steps: int, batch_size: int, learning_rate: float, warmup_steps: int,
               max_prompt_len: int, max_len: int, seed: int, chat: bool = False,
               corrupt_fraction: float = 0.0, log_every: int = 50) -> tuple[dict, list[float]]:
    """`steps` AdamW steps of next-token cross-entropy on the solutions; returns (params, losses).

    `corrupt_fraction` of the demonstrations (fixed per record) end in an off-by-one final answer:
    noisy SFT data give the policy a systematic error mode for verifier-rewarded RL to remove.
    """
    records = [r for r in records if r.get("solution")]
    if not records:
        raise ValueError("SFT warm start needs records with a 'solution' field")
    if not 0.0 <= corrupt_fraction < 1.0:
        raise ValueError(f"sft.corrupt_fraction must be in [0, 1), got {corrupt_fraction}")
    corrupt = np.random.default_rng([seed, 1]).random(len(records)) < corrupt_fraction
    targets = [corrupt_final_answer(r["solution"], r["reference"]) if bad else r["solution"]
               for r, bad in zip(records, corrupt)]
    tx = make_optimizer(learning_rate, warmup_steps=warmup_steps, schedule="cosine",
                        total_steps=steps, grad_clip=1.0)
    valid_vocab = len(tokenizer)

    def loss_fn(p, batch):
        logp, _ = response_logprobs(p, cfg, batch["prompt_tokens"], batch["prompt_mask"],
                                    batch["tokens"], batch["mask"], valid_vocab=valid_vocab)
        loss = -(logp * batch["mask"]).sum() / jnp.maximum(batch["mask"].sum(), 1)
        return loss, loss

    @jax.jit
    def step(model, batch):
        model, loss, _ = gradient_step(loss_fn, model, tx, batch)
        return model, loss

    rng = np.random.default_rng(seed)
    model = ModelState(params, tx.init(params))
    mesh, hosts = host.mesh_of(params), jax.process_count()
    if batch_size % hosts:
        raise ValueError(f"sft.batch_size ({batch_size}) must be a multiple of the number of "
                         f"processes ({hosts})")
    losses = []
    for i in range(steps):
        # every host draws the global batch and tokenises its own block of it
        chosen = rng.integers(0, len(records), batch_size)[host.row_block(batch_size // hosts)]
        prompts = [format_prompt(template, records[j]["question"], tokenizer=tokenizer, chat=chat)
                   for j in chosen]
        p_ids, p_mask = tokenize_prompts(tokenizer, prompts, max_prompt_len)
        r_ids, r_mask = tokenize_responses(tokenizer, [targets[j] for j in chosen],
                                           max_len - max_prompt_len)
        batch = {"prompt_tokens": p_ids, "prompt_mask": p_mask, "tokens": r_ids, "mask": r_mask}
        if mesh is not None:
            batch = host.global_batch(batch, mesh)
        model, loss = step(model, batch)
        losses.append(float(loss))
        if log_every and (i + 1) % log_every == 0:
            log.info("sft step %d/%d loss %.4f", i + 1, steps, np.mean(losses[-log_every:]))
    return model.params, losses


@dataclasses.dataclass(frozen=True)
class SFTSettings:
    """`warm_start`'s settings, read once from the config's `sft` and `data` sections by the
    entry point (`from_config`)."""
    template: str
    steps: int
    batch_size: int
    learning_rate: float
    warmup_steps: int
    max_prompt_len: int
    max_len: int
    seed: int
    chat: bool = False
    corrupt_fraction: float = 0.0

    @classmethod
    def from_config(cls, config) -> "SFTSettings":
        s, d = config.sft, config.data
        return cls(d.prompt_template, s.steps, s.batch_size, s.learning_rate, s.warmup_steps,
                   d.max_prompt_len, s.max_len, config.seed, bool(d.chat_template),
                   s.corrupt_fraction)


def warm_start_with(settings: SFTSettings, params, cfg: models.ModelConfig, tokenizer,
                    records: list[dict]) -> tuple[dict, list[float]]:
    """`warm_start` with `settings`."""
    return warm_start(params, cfg, tokenizer, records, **dataclasses.asdict(settings))
