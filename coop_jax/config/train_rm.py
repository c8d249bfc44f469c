"""coop-train-rm's settings (`--config.rm_train.x=y`). 0 / "" mean "from the rest of the config"
(lengths from data / rollout / rm, dataset from data). The optimiser's values are the paper's
VerifyRM ones; the batch and lengths are CPU-sized (`configs/verifyrm.py` is the paper's recipe,
docs/ALGORITHMS.md §1 lists the differences)."""
from __future__ import annotations

import dataclasses

from coop_jax.config.fields import Section, field
from coop_jax.optim import SCHEDULES, WEIGHT_DECAY_MASKS
from coop_jax.registry import Registry

RM_TRAIN_MODES = Registry("rm_train.mode", {
    "build_triples": "sample a policy; label the completions by the rule verifier (and a judge)",
    "train": "train the RM with BCE on labelled triples"})
RM_OVERLONG = Registry("rm_train.overlong", {
    "drop": "leave out triples over rm_train.max_chars characters (the reference)",
    "truncate": "keep them; the tokens are cut to max_len on rm.truncation_side"})

# fields that must be > 0, and fields that may also be 0
_POSITIVE = ("epochs", "batch_size", "micro_batches", "max_chars", "log_every",
             "samples_per_question", "judge_concurrency", "judge_max_tokens", "learning_rate")
_NON_NEGATIVE = ("num_examples", "max_len", "max_prompt_len", "max_new_tokens", "heldout_every",
                 "checkpoint_every", "weight_decay", "grad_clip")
_FRACTIONS = ("warmup_ratio", "heldout_fraction")  # in [0, 1)


@dataclasses.dataclass(frozen=True)
class RMTrain(Section):
    """coop-train-rm's section: typed in every run's config, its values checked when coop-train-rm
    runs (`check_values`: a coop-train config leaves `mode` unset)."""
    batch_size: int = field(16, 'train: triples per AdamW step')
    char_cut: bool = field(True, 'train: texts over 1,500 characters keep first 500 + last 1,000 '
                                 '(as at RL time)')
    chat: bool = field(False, "build_triples: wrap prompts in the tokenizer's chat template")
    checkpoint_every: int = field(50, 'train: resumable checkpoint every N steps (0: only the '
                                      'final one)')
    data_dir: str = field('', 'build_triples: folder of its split files ("": data.data_dir)')
    dataset: str = field('', 'build_triples: dataset of the questions ("": data.dataset)')
    epochs: int = field(3, 'train: passes over the triples')
    export_hf: str = field('', 'train: also write the trained RM as an HF folder here')
    grad_clip: float = field(1.0, 'train: global gradient-norm clip (0: off)')
    heldout: str = field('', 'train: held-out triples JSONL to evaluate on')
    heldout_every: int = field(0, 'train: also evaluate the held-out triples every N steps (0: per'
                                  ' epoch)')
    heldout_fraction: float = field(0.0, 'build_triples: fraction of questions set aside as held-'
                                         'out triples')
    heldout_out: str = field('', 'build_triples: JSONL of the held-out triples')
    init_hf: str = field('', 'train: HF model to start the RM from ("": the reward_model section)')
    judge_concurrency: int = field(8, 'build_triples: judge requests in flight')
    judge_max_tokens: int = field(1024, 'build_triples: tokens of one judge reply')
    judge_model: str = field('', "build_triples: the judge's model name")
    judge_url: str = field('', 'build_triples: OpenAI-compatible endpoint of an LLM judge ("": '
                               'rule only)')
    learning_rate: float = field(2e-05, 'train: AdamW peak learning rate')
    log_every: int = field(10, 'train: log every N steps')
    max_chars: int = field(8000, 'train: longest triple in characters')
    max_len: int = field(0, 'train: RM input tokens (0: rm.max_len)')
    max_new_tokens: int = field(0, 'build_triples: response tokens (0: rollout.max_new_tokens)')
    max_prompt_len: int = field(0, 'build_triples: prompt tokens (0: data.max_prompt_len)')
    micro_batches: int = field(1, 'train: gradient accumulation within a step (lax.scan)')
    mode: str = field('', "build_triples (sample and label a policy's completions) | train (BCE on"
                          " triples)")
    num_examples: int = field(0, 'build_triples: first N questions (0: all)')
    out: str = field('', 'build_triples: the triples JSONL to write')
    overlong: str = field('drop', 'train: triples over max_chars: drop (the reference) | truncate')
    policy_checkpoint: str = field('', 'build_triples: coop-train workdir of the sampling policy')
    policy_hf: str = field('', 'build_triples: HF folder / .gguf / Hub id of the sampling policy')
    samples_per_question: int = field(4, 'build_triples: completions sampled per question')
    schedule: str = field('linear', 'train: learning-rate schedule after the warm-up (as '
                                    'optim.schedule)')
    seed: int = field(0, 'seed of the shuffles, the held-out split and the sampling')
    split: str = field('train', 'build_triples: split to sample on')
    temperature: float = field(1.0, 'build_triples: sampling temperature')
    template: str = field('', 'build_triples: prompt template ("": the checkpoint\'s or the '
                              'dataset\'s)')
    top_p: float = field(1.0, 'build_triples: nucleus sampling threshold')
    triples: str = field('', 'train: labelled triples JSONL to train on')
    warmup_ratio: float = field(0.0, 'train: fraction of the steps spent warming up the learning '
                                     'rate')
    weight_decay: float = field(0.01, 'train: AdamW weight decay')
    weight_decay_mask: str = field('all', 'train: parameters that decay (no_bias_norm: not biases '
                                          '/ norms)')
    workdir: str = field('', 'train: output folder (checkpoints/, rm_metrics.jsonl, '
                             'rm_summary.json)')

    def check_values(self, path: str = "rm_train") -> None:
        """Raise ValueError naming the first value coop-train-rm cannot run with."""
        for name, registry in (("mode", RM_TRAIN_MODES), ("overlong", RM_OVERLONG),
                               ("schedule", SCHEDULES), ("weight_decay_mask", WEIGHT_DECAY_MASKS)):
            registry.check(getattr(self, name), f"{path}.{name}")
        for names, ok, bound in ((_POSITIVE, lambda v: v > 0, "> 0"),
                                 (_NON_NEGATIVE, lambda v: v >= 0, ">= 0"),
                                 (_FRACTIONS, lambda v: 0 <= v < 1, "in [0, 1)")):
            for name in names:
                if not ok(getattr(self, name)):
                    raise ValueError(f"config.{path}.{name} must be {bound}, got "
                                     f"{getattr(self, name)!r}")
