"""Hack probes: a fixed set of rule-wrong completions, each tagged with its `pattern`, scored
every `evals.probes.every` steps of a run (`probes.triples`, JSONL triples with a "pattern" field;
`coop_jax.projects.reward_hacking.hack_probes` builds them for the synthetic task).

Per pattern it logs
* `probe/<pattern>/rm_false_accept`: the fraction the run's reward RM scores above its decision
  threshold (score > 0, i.e. sigmoid > 0.5, as `rm_rule_agreement`), when the run has an RM;
* `probe/<pattern>/policy_logp`: the mean teacher-forced log-likelihood per token (the
  completion and its end-of-sequence token, at the sampling temperature) under the current
  policy, i.e. how reachable the pattern is for the policy,
and `probe/rm_false_accept` over all probes.

Format probes (`probes.format_questions`; `coop_jax.data.answer_forms`): held-out questions'
right and wrong answers in several forms; per form the run's RM's mean raw score,
`format/<form>/right_score` and `format/<form>/wrong_score`, and
`format/unmarked_minus_marked`: the right answers' mean score in the unmarked forms minus in the
task's marked one (below 0: the RM prefers the marker).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from coop_jax import models
from coop_jax.data import format_prompt
from coop_jax.data.answer_forms import MARKED_FORM, UNMARKED_FORMS
from coop_jax.models.logprobs import response_logprobs
from coop_jax.rm.input import RMInputFormat, read_triples
from coop_jax.rm.scoring import map_rows, score_triples
from coop_jax.sampling import tokenize_prompts
from coop_jax.trainer.sft import tokenize_responses


def read_probes(path: str) -> list[dict]:
    """Probe triples: rule-wrong (label false) and each with a non-empty "pattern"."""
    probes = read_triples(path)
    for i, p in enumerate(probes):
        if not isinstance(p.get("pattern"), str) or not p["pattern"] or p["label"]:
            raise ValueError(f"{path} line {i + 1}: a probe needs a \"pattern\" and label false")
    return probes


@functools.lru_cache(maxsize=8)
def _jit_mean_logp(cfg: models.ModelConfig, temperature: float, valid_vocab: int):
    def mean_logp(params, prompt, prompt_mask, tokens, mask):
        logp, _ = response_logprobs(params, cfg, prompt, prompt_mask, tokens, mask,
                                    temperature=temperature, valid_vocab=valid_vocab)
        return (logp * mask).sum(-1) / jnp.maximum(mask.sum(-1), 1)
    return jax.jit(mean_logp)


def policy_logp(params, cfg: models.ModelConfig, tokenizer, probes: Sequence[dict], *,
                template: str, chat: bool, max_prompt_len: int, max_new_tokens: int,
                temperature: float = 1.0, batch_size: int = 64) -> np.ndarray:
    """Mean log-prob per token of each probe's completion (+ EOS) given its prompt [n]."""
    prompts = [format_prompt(template, p["question"], tokenizer=tokenizer, chat=chat)
               for p in probes]
    p_ids, p_mask = tokenize_prompts(tokenizer, prompts, max_prompt_len)
    r_ids, r_mask = tokenize_responses(tokenizer, [p["completion"] for p in probes],
                                       max_new_tokens)
    fn = _jit_mean_logp(cfg, float(temperature), min(len(tokenizer), cfg.vocab_size))
    return map_rows(fn, params, (p_ids, p_mask, r_ids, r_mask), batch_size)


def per_pattern(probes: Sequence[dict], values: np.ndarray, name: str) -> dict:
    """{"probe/<pattern>/<name>": the mean of `values` over that pattern's probes}."""
    patterns = np.array([p["pattern"] for p in probes])
    return {f"probe/{k}/{name}": float(values[patterns == k].mean())
            for k in dict.fromkeys(patterns.tolist())}


@dataclasses.dataclass(frozen=True)
class ProbeSettings:
    """What the probes read of the config (the rollouts' prompt, length and temperature), built
    once by the entry point (`from_config`)."""
    triples: str  # probes.triples ("": no probes)
    format_questions: int  # probes.format_questions (0: no format probes)
    template: str
    chat: bool
    max_prompt_len: int
    max_new_tokens: int
    temperature: float
    batch_size: int

    @classmethod
    def from_config(cls, config) -> "ProbeSettings":
        d, r = config.data, config.rollout
        return cls(config.probes.triples, int(config.probes.format_questions),
                   d.prompt_template, bool(d.chat_template),
                   d.max_prompt_len, r.max_new_tokens, r.temperature, config.eval.batch_size)


def probe_metrics(probes: Sequence[dict], policy: tuple[Any, models.ModelConfig, Any],
                  rm: tuple[Any, models.ModelConfig, Any, RMInputFormat] | None,
                  settings: ProbeSettings) -> dict:
    """The probe metrics (module doc) of `policy` = (params, cfg, tokenizer) and, when given,
    `rm` = (params, cfg, tokenizer, input format), with the run's data / rollout settings."""
    params, cfg, tokenizer = policy
    s = settings
    logp = policy_logp(params, cfg, tokenizer, probes, template=s.template, chat=s.chat,
                       max_prompt_len=s.max_prompt_len, max_new_tokens=s.max_new_tokens,
                       temperature=s.temperature, batch_size=s.batch_size)
    metrics = per_pattern(probes, logp, "policy_logp")
    if rm is not None:
        rm_params, rm_cfg, rm_tokenizer, fmt = rm
        accepted = score_triples(rm_params, rm_cfg, rm_tokenizer, probes, fmt=fmt,
                                 batch_size=s.batch_size) > 0
        metrics |= per_pattern(probes, accepted.astype(np.float64), "rm_false_accept")
        metrics["probe/rm_false_accept"] = float(accepted.mean())
    return metrics


def format_metrics(probes: Sequence[dict], rm: tuple[Any, models.ModelConfig, Any, RMInputFormat],
                   marker: str, batch_size: int = 64) -> dict:
    """The format probes' metrics (module doc) of `rm` = (params, cfg, tokenizer, input format);
    `marker`: the task's answer marker (`answer_forms.MARKERS`)."""
    rm_params, rm_cfg, rm_tokenizer, fmt = rm
    scores = score_triples(rm_params, rm_cfg, rm_tokenizer, probes, fmt=fmt,
                           batch_size=batch_size)
    forms = np.array([p["form"] for p in probes])
    right = np.array([bool(p["label"]) for p in probes])
    out = {}
    for form in dict.fromkeys(forms.tolist()):
        for name, label in (("right", True), ("wrong", False)):
            out[f"format/{form}/{name}_score"] = float(scores[(forms == form) & (right == label)]
                                                       .mean())
    unmarked = np.mean([out[f"format/{f}/right_score"] for f in UNMARKED_FORMS])
    out["format/unmarked_minus_marked"] = float(
        unmarked - out[f"format/{MARKED_FORM[marker]}/right_score"])
    return out
