"""A reward model's scores and accuracy on labelled triples: held-out evaluation during
`coop-train` / `coop-train-rm` and `coop-eval --rm_triples` share it."""
from __future__ import annotations

import functools
import logging
import math
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from coop_jax import models
from coop_jax.parallel import host
from coop_jax.rm.input import RMInputFormat, check_triples
from coop_jax.sampling.batching import fixed_batches
from coop_jax.stats import BOOTSTRAP, bootstrap_ci, ci, interval_to_json, roc_auc

logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=8)
def _jit_scores(cfg: models.ModelConfig):
    return jax.jit(lambda p, t, m: models.reward_scores(p, cfg, t, m))


def score_triples(params, rm_cfg: models.ModelConfig, tokenizer, triples: Sequence[dict], *,
                  fmt: RMInputFormat, batch_size: int) -> np.ndarray:
    """Raw RM scores [n] (logits; sigmoid > 0.5 ⇔ score > 0) of the triples' inputs in `fmt`,
    fixed batch shape."""
    if not rm_cfg.is_reward_model:
        raise ValueError("evaluate_reward_model needs a reward model config (num_labels >= 1)")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    ids, mask = fmt.tokenize_triples(tokenizer, triples)
    return map_rows(_jit_scores(rm_cfg), params, (ids, mask), batch_size)


def map_rows(fn, params, arrays: Sequence[np.ndarray], batch_size: int) -> np.ndarray:
    """`fn(params, *arrays' rows)` -> one value per row (the first of its row), over every row of
    `arrays` in fixed-shape batches of about `batch_size` rows, each host computing its block;
    float64 [n] on every host."""
    n = len(arrays[0])
    mesh, hosts = host.mesh_of(params), jax.process_count()
    bs = -(-min(batch_size, n) // hosts) * hosts
    out = []
    for idx, real in fixed_batches(np.arange(n), bs):
        block = idx[host.row_block(bs // hosts)]
        rows = [a[block] for a in arrays]
        batch = ([jnp.asarray(r) for r in rows] if mesh is None
                 else host.global_batch(rows, mesh))
        values = host.local_rows(host.host_aligned(fn(params, *batch)))
        values = host.gather_rows(np.asarray(values, np.float32).reshape(len(block), -1)[:, 0])
        out.append(values.astype(np.float64)[:real])
    return np.concatenate(out)


def evaluate_reward_model(params, rm_cfg: models.ModelConfig, tokenizer, triples: Sequence[dict],
                          *, fmt: RMInputFormat, batch_size: int = 64
                          ) -> tuple[dict, list[dict]]:
    """Accuracy (score > 0 ⇔ label) and ROC AUC on labelled triples (inputs in `fmt`), with
    bootstrap 95% CIs."""
    labels = np.asarray(check_triples(triples))
    scores = score_triples(params, rm_cfg, tokenizer, triples, fmt=fmt, batch_size=batch_size)
    if not np.all(np.isfinite(scores)):
        raise FloatingPointError("the reward model produced NaN/inf scores")
    correct = ((scores > 0) == labels).astype(np.float64)
    auc = bootstrap_ci(np.stack([scores, labels.astype(np.float64)], 1),
                       statistic=lambda a: roc_auc(a[:, 0], a[:, 1]), **BOOTSTRAP)
    mean_or_none = lambda x: float(x.mean()) if x.size else None
    report = {"num_triples": int(len(labels)), "num_positive": int(labels.sum()),
              "num_negative": int((~labels).sum()), "accuracy": ci(correct),
              "roc_auc": interval_to_json(auc),
              "mean_score_positive": mean_or_none(scores[labels]),
              "mean_score_negative": mean_or_none(scores[~labels]),
              "max_len": int(fmt.max_len), "question_format": fmt.question_format,
              "truncation_side": fmt.truncation_side, "template": fmt.template,
              "bootstrap": dict(BOOTSTRAP)}
    if math.isnan(auc["mean"]):
        logger.warning("ROC AUC is undefined: the triples hold a single label class")
    rows = [{"id": t.get("id", str(i)), "question": t["question"], "reference": t["reference"],
             "completion": t["completion"], "label": bool(y), "score": float(s),
             "predicted": bool(s > 0), "correct": bool(c)}
            for i, (t, y, s, c) in enumerate(zip(triples, labels, scores, correct))]
    return report, rows
