"""The sections of a run's config (coop-train), each a frozen dataclass whose fields carry their
type, default, one-line doc and check (`fields.field`); rules between the fields of one section
are its `check`. The training registries (reward types, negative strategies, evaluators) are
checked by the trainer at start (`trainer.setup.validate_config`): this package imports no
training code."""
from __future__ import annotations

import dataclasses

from coop_jax import data, kernels, rl
from coop_jax.config.fields import (Section, field, in_unit_interval, non_negative,
                                    positive, section)
from coop_jax.models.config import DTYPES
from coop_jax.models.families import MODEL_FAMILIES
from coop_jax.models.lora import TARGETS as LORA_TARGETS
from coop_jax.optim import SCHEDULES
from coop_jax.rm.input import QUESTION_FORMATS, TRUNCATIONS
from coop_jax.sampling.engine import ENGINES as ROLLOUT_ENGINES
from coop_jax.verify import EXTRACTION_MODES

NAN_POLICIES = ("error", "skip")
EVAL_HEADLINES = ("avg_at_k", "greedy")
# "auto": the reward type's reference default (`rewards.extraction_mode`), or a verifier mode
AUTO_EXTRACTION = "auto"
EXTRACTION_CHOICES = (AUTO_EXTRACTION,) + tuple(EXTRACTION_MODES)
_EXTRACTIONS = " | ".join(EXTRACTION_CHOICES)


def _lora_targets(value: str) -> str | None:
    targets = [t.strip() for t in value.split(",") if t.strip()]
    if targets and all(t in LORA_TARGETS for t in targets):
        return None
    return f"comma-separated names of {list(LORA_TARGETS)}"


@dataclasses.dataclass(frozen=True)
class Lora(Section):
    """LoRA in coop-train (models.lora): the update is scaled by alpha / rank."""
    alpha: float = field(32.0, "LoRA scale: the update is multiplied by alpha / rank")
    dropout: float = field(0.0, "LoRA dropout (must be 0.0)")
    rank: int = field(0, "LoRA rank (0: off, full fine-tuning)", check=non_negative)
    targets: str = field(",".join(LORA_TARGETS), "comma-separated projections that get adapters "
                         "(models.lora.TARGETS)")

    def check(self, path: str) -> None:
        if not self.rank:
            return
        if not self.alpha > 0:
            raise ValueError(f"config.{path}.alpha must be > 0, got {self.alpha!r}")
        if self.dropout != 0:
            raise ValueError(f"config.{path}.dropout must be 0.0 (LoRA dropout is not supported: "
                             "the sampler and the step's old / reference log-probs would each see"
                             f" another function), got {self.dropout!r}")
        wrong = _lora_targets(self.targets)
        if wrong:
            raise ValueError(f"config.{path}.targets must be {wrong}, got {self.targets!r}")


_ARCHITECTURE = ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                 "num_kv_heads")


@dataclasses.dataclass(frozen=True)
class Model(Section):
    """A model: either `hf_path` (HF folder, .gguf file or Hub id) or the architecture fields."""
    dtype: str = field("float32", "compute dtype of the forward pass")
    family: str = field("qwen2", "architecture family of a random-init model (models.families)")
    head_dim: int = field(0, "width of one head (0: hidden_size / num_heads)")
    hf_path: str = field("", "HF folder, .gguf file or Hub id to load (then the architecture "
                         "fields are unused)")
    hidden_size: int = field(128, "width of the residual stream")
    intermediate_size: int = field(384, "width of the MLP")
    keep_layers: int = field(0, "with hf_path: keep only the first k decoder layers (0: all)",
                             check=non_negative)
    lora: Lora = section(Lora)
    max_position_embeddings: int = field(512, "longest sequence (prompt + response) the model "
                                         "takes")
    num_heads: int = field(4, "query heads per layer")
    num_kv_heads: int = field(2, "key / value heads per layer (grouped-query attention; "
                              "divides num_heads)")
    num_layers: int = field(4, "decoder layers")
    param_dtype: str = field("float32", "dtype of the stored parameters and the optimizer update")
    qkv_bias: bool = field(True, "biases on the q / k / v projections (Qwen2 style)")
    remat: bool = field(False, "recompute activations in the backward pass (less memory, more "
                        "compute)")
    rms_norm_eps: float = field(1e-6, "epsilon of the RMSNorm layers")
    rope_theta: float = field(10000.0, "RoPE base frequency")
    scan_layers: bool = field(False, "nn.scan over the layers: one compiled block, stacked "
                              "parameters")
    tie_embeddings: bool = field(True, "the output head reuses the input embedding")
    tokenizer: str = field("", "tokenizer folder or Hub id (\"\": hf_path's, else the shipped "
                           "char tokenizer)")
    vocab_size: int = field(128, "vocabulary size (random init; the tokenizer's when larger)")

    def check_architecture(self, path: str) -> None:
        """The architecture of a random-init model (nothing to check with `hf_path`)."""
        if self.hf_path:
            return
        for name in _ARCHITECTURE:
            if not getattr(self, name) > 0:
                raise ValueError(f"config.{path}.{name} must be > 0, got {getattr(self, name)!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"config.{path}.num_heads ({self.num_heads}) must be a multiple of "
                             f"{path}.num_kv_heads ({self.num_kv_heads})")
        for name in ("param_dtype", "dtype"):
            if getattr(self, name) not in DTYPES:
                raise ValueError(f"config.{path}.{name} must be one of {list(DTYPES)}, got "
                                 f"{getattr(self, name)!r}")
        MODEL_FAMILIES.check(self.family, f"{path}.family")


@dataclasses.dataclass(frozen=True)
class RM(Section):
    """The reward model's own settings, shared by the static RM, Cooper and RM training: where it
    starts, its input (`rm.input.RMInputFormat`) and its held-out triples. Its architecture (or
    source) is the `reward_model` model section."""
    checkpoint: str = field("", "start the RM from this coop-train / coop-train-rm workdir")
    heldout_triples: str = field("", "JSONL of triples the RM is evaluated on during training "
                                 "(evals.rm_heldout)")
    max_len: int = field(256, "RM input tokens", check=positive)
    question_format: str = field("prompt", "the RM input's <question>: prompt (the full user "
                                 "prompt) | question (the raw question)",
                                 choices=tuple(QUESTION_FORMATS))
    truncation_side: str = field("left", "an RM input over max_len tokens loses this end (left "
                                 "keeps the completion's end, where the score is read)",
                                 choices=tuple(TRUNCATIONS))


@dataclasses.dataclass(frozen=True)
class Synthetic(Section):
    answer_format: str = field("####", "synthetic: final answer as '#### n' | '\\boxed{n}' "
                               "(boxed)")
    max_operand: int = field(20, "synthetic: largest operand")
    num_operands_max: int = field(3, "synthetic: most operands of a problem")
    num_operands_min: int = field(2, "synthetic: fewest operands of a problem (>= 2)")
    ops: str = field("+-", "synthetic: operators used, distinct characters of '+-*'")
    surface: str = field("expression", "synthetic: bare expression | short word problem (words)")


@dataclasses.dataclass(frozen=True)
class Data(Section):
    chat_template: bool = field(False, "wrap prompts in the tokenizer's chat template")
    data_dir: str = field("", "folder with <split>.jsonl or <dataset>/<split>.jsonl (file "
                          "datasets)")
    dataset: str = field("synthetic", "the task: its problems and splits", choices=data.DATASETS)
    eval_split: str = field("test", "split of the held-out evaluation")
    max_prompt_len: int = field(32, "prompt tokens (longer prompts are cut)", check=positive)
    num_eval: int = field(128, "held-out problems evaluated (0: all)", check=non_negative)
    num_train: int = field(0, "first N training problems (0: all; file datasets)")
    prompt_template: str = field("synthetic", "how a question becomes the prompt",
                                 choices=data.PROMPT_TEMPLATES)
    rephrase_field: str = field("rephrased", "record field holding the rephrased question "
                                "(corewarding_1)")
    synthetic: Synthetic = section(Synthetic)
    synthetic_train_size: int = field(20000, "synthetic: training problems generated")
    train_split: str = field("train", "split trained on")

    def check(self, path: str) -> None:
        if not self.data_dir and data.sources.needs_data_dir(self.dataset):  # else: the Hub copy
            raise ValueError(f"config.{path}.data_dir is required for {path}.dataset="
                             f"{self.dataset!r}")


@dataclasses.dataclass(frozen=True)
class SFT(Section):
    """Supervised warm start on reference solutions (0 steps: start RL from the loaded policy)."""
    batch_size: int = field(64, "SFT examples per step")
    corrupt_fraction: float = field(0.0, "fraction of SFT demonstrations with an off-by-one "
                                    "final answer")
    learning_rate: float = field(1e-3, "SFT peak learning rate")
    max_len: int = field(96, "SFT sequence tokens (prompt + solution)")
    steps: int = field(0, "supervised warm-up steps on reference solutions (0: none)")
    warmup_steps: int = field(20, "SFT learning-rate warm-up steps")


@dataclasses.dataclass(frozen=True)
class Rollout(Section):
    engine: str = field("static", "static (all rows in lock step) | continuous (decode slots "
                        "refilled as rows finish: sampling.engine)", choices=ROLLOUT_ENGINES)
    group_size: int = field(8, "completions sampled per prompt (the group of GRPO-family "
                            "advantages)",
                            check=lambda n: None if n >= 2 else ">= 2 (group-relative advantages)")
    max_new_tokens: int = field(48, "response tokens", check=positive)
    overlap: bool = field(False, "one-step off-policy: sample step t+1 while step t updates "
                          "(rollouts of the policy before update t-1, prepared on the host)")
    prompts_per_step: int = field(16, "prompts per step (rows = prompts_per_step x group_size)",
                                  check=positive)
    slot_halvings: int = field(3, "continuous engine: how many times the slots may halve once "
                               "the queue is empty and half of them are idle (0: never)",
                               check=non_negative)
    slots: int = field(0, "continuous engine: decode slots (0: one per row of the step)",
                       check=non_negative)
    temperature: float = field(1.0, "sampling temperature", check=positive)
    top_k: int = field(0, "top-k sampling (0: off)", check=non_negative)
    top_p: float = field(1.0, "nucleus sampling threshold (1: off)", check=in_unit_interval)


def _dual_clip(value) -> str | None:
    return None if value is None or value == 0 or value > 1 else "0 (off) or > 1"


@dataclasses.dataclass(frozen=True)
class RL(Section):
    advantage: str = field("grpo", "advantage estimator", choices=rl.ADVANTAGES)
    aggregation: str = field("token_mean", "how token losses are averaged into the loss "
                             "(token_mean: the exact mini-batch token mean)",
                             choices=rl.AGGREGATIONS)
    clip_eps_high: float = field(0.2, "PPO ratio clip above 1 (1 + eps; DAPO clip-higher when > "
                                 "low)")
    clip_eps_low: float = field(0.2, "PPO ratio clip below 1 (1 - eps)")
    clip_ratio_c: float | None = field(None, "dual-clip bound on negative-advantage tokens (0: "
                                       "off; unset: 3 for token-level ppo, off otherwise); acts "
                                       "only off-policy", check=_dual_clip)
    dynamic_max_draws: int = field(4, "dynamic sampling: most draws per step")
    dynamic_sampling: bool = field(False, "DAPO: drop groups with equal rewards and draw more "
                                   "prompts")
    entropy_coef: float = field(0.0, "entropy bonus weight")
    kl_coef: float = field(0.001, "weight of the KL penalty to the reference policy (0: none)",
                           check=non_negative)
    kl_controller: str = field("fixed", "KL-in-reward coefficient: fixed (rl.kl_coef) | adaptive",
                               choices=rl.KL_CONTROLLERS)
    kl_estimator: str = field("low_var_kl", "KL estimator", choices=rl.KL_ESTIMATORS)
    kl_horizon: int = field(10000, "adaptive KL controller: its horizon in rollouts")
    kl_in_reward: bool = field(False, "subtract the KL from the rewards instead of adding it to "
                               "the loss")
    kl_target: float = field(0.1, "adaptive KL controller: the KL it steers toward")
    log_kl_to_start: bool = field(False, "log KL(pi || pi_start) of the rollouts (kl_to_start), "
                                  "also with kl_coef 0")
    micro_batches: int = field(1, "gradient accumulation within a mini-batch (lax.scan; same "
                               "update)", check=positive)
    num_minibatches: int = field(1, "optimizer updates per pass (divides the step's rows)",
                                 check=positive)
    overlong: str = field("none", "treatment of truncated responses", choices=rl.OVERLONG)
    overlong_cache_len: int = field(8, "overlong penalty: tokens before max_new_tokens where it "
                                    "ramps up")
    overlong_factor: float = field(1.0, "overlong penalty: its largest value")
    pad_buckets: int = field(4, "learner: padding cut to the batch's longest, rounded up to one "
                             "of this many lengths per axis (0: full lengths)", check=non_negative)
    policy_loss: str = field("ppo", "per-token surrogate: ppo (clipped) | cispo (clipped weights)",
                             choices=rl.POLICY_LOSSES)
    ppo_epochs: int = field(1, "passes over each step's rollouts", check=positive)
    ratio_level: str = field("token", "importance ratio per token | per sequence (GSPO)",
                             choices=("token", "sequence"))
    reuse_loss_forward: bool = field(True, "on-policy steps: old log-probs from the loss "
                                     "forward, no second pass")
    share_prompt_prefix: bool = field(True, "learner: each prompt's forward runs once for its "
                                      "group's rollouts, which attend to its keys and values; "
                                      "with rl.pad_buckets, the RM's inputs likewise share their "
                                      "group's (question, reference) tokens")
    tis_cap: float = field(0.0, "truncated importance sampling: weigh each token's loss by "
                           "min(pi_learner / pi_sampler, cap), the sampler's log-probs kept with "
                           "the rollouts (0: off)", check=non_negative)

    def check(self, path: str) -> None:
        rl.check_policy_loss(self.policy_loss, self.ratio_level, f"config.{path}.")
        if self.kl_controller == "fixed":
            return
        if not self.kl_in_reward:
            raise ValueError(f"config.{path}.kl_controller={self.kl_controller!r} steers the KL "
                             f"in the reward: it needs {path}.kl_in_reward=True")
        for name in ("kl_target", "kl_horizon"):
            if not getattr(self, name) > 0:
                raise ValueError(f"config.{path}.{name} must be > 0, got "
                                 f"{getattr(self, name)!r}")


@dataclasses.dataclass(frozen=True)
class Optim(Section):
    b1: float = field(0.9, "AdamW beta1")
    b2: float = field(0.999, "AdamW beta2")
    eps: float = field(1e-8, "AdamW epsilon")
    grad_clip: float = field(1.0, "policy global gradient-norm clip (0: off)")
    learning_rate: float = field(1e-6, "policy AdamW peak learning rate", check=positive)
    schedule: str = field("constant", "policy learning-rate schedule after the warm-up",
                          choices=SCHEDULES)
    warmup_steps: int = field(20, "policy learning-rate warm-up steps")
    weight_decay: float = field(0.01, "policy AdamW weight decay")


@dataclasses.dataclass(frozen=True)
class Reward(Section):
    hybrid_rm_weight: float = field(0.5, "hybrid: weight w of the RM in rule * (1 - w) + w * "
                                    "sigmoid(RM)")
    threshold: bool = field(False, "RM rewards: 1[sigmoid > 0.5] instead of the sigmoid")
    type: str = field("rule", "where the rewards come from (rewards.REWARD_SOURCES)")
    vote_match: str = field("exact", "voting rewards: how two answers match "
                            "(rewards.ANSWER_MATCHES; exact: the references)")


@dataclasses.dataclass(frozen=True)
class Cooper(Section):
    """Cooper's own settings: its pairs, their negatives and the RM's co-training optimiser
    (warmup_ratio 0 and no_pair_step zero_grad follow the reference's RM optimiser)."""
    assistant_hf_path: str = field("", "rewrite: local HF causal LM that writes the negatives")
    assistant_model: str = field("", "rewrite: the endpoint's model name")
    assistant_url: str = field("", "rewrite: OpenAI-compatible endpoint that writes the "
                               "negatives")
    grad_clip: float = field(1.0, "RM global gradient-norm clip (0: off)")
    learning_rate: float = field(1e-5, "RM AdamW learning rate")
    micro_batches: int = field(1, "the RM's pair gradient accumulated over micro-batches "
                               "(lax.scan)", check=positive)
    negative: str = field("rewrite", "how a pair's negative is made "
                          "(cooper.NEGATIVE_STRATEGIES)")
    negative_check: str = field("reference", "how a made negative is verified wrong "
                                "(cooper.KEEP_RULES)")
    no_pair_step: str = field("zero_grad", "a step without a valid pair: zero_grad (AdamW on "
                              "zeros) | skip (no RM step)", choices=("zero_grad", "skip"))
    pair_label_noise: float = field(0.0, "probability that a pair's positive and negative are "
                                    "swapped (0.5: the sham-Cooper control)")
    pair_labels: str = field(AUTO_EXTRACTION, "the rule that labels the pairs' rollouts right or "
                             f"wrong: {_EXTRACTIONS} (auto: verifier.extraction's)",
                             choices=EXTRACTION_CHOICES)
    pairs_per_group: int = field(1, "pairs per group: the k highest-scored wrong rollouts, one "
                                 "pair each (needs an on-device negative, rollout_hardest)")
    reference_positive: bool = field(False, "a group with no correct rollout takes its record's "
                                     "reference solution as the positive (beyond the paper)")
    rewrite_temperature: float = field(0.7, "rewrite: the assistant's sampling temperature")
    rewrite_tries: int = field(3, "rewrite: attempts per negative")
    warmup_ratio: float = field(0.0, "fraction of the run spent warming up the RM learning rate")
    weight_decay: float = field(0.01, "RM AdamW weight decay")


@dataclasses.dataclass(frozen=True)
class Corewarding(Section):
    a_end: float = field(1e-5, "corewarding_2: teacher EMA rate at the end")
    a_start: float = field(0.01, "corewarding_2: teacher EMA rate at the start (cosine decay)")
    decay_steps: int = field(0, "corewarding_2: steps of the decay (0: train.steps)")


@dataclasses.dataclass(frozen=True)
class Probes(Section):
    """Hack probes (trainer.probes), run by `evals.probes`."""
    format_questions: int = field(0, "format probes: right and wrong answers to this many "
                                  "held-out questions in several forms (#### N, The answer is: "
                                  "N, bare, boxed, repeated); the RM's mean score per form (0: "
                                  "off)", check=non_negative)
    triples: str = field("", "JSONL of hack probes (rule-wrong completions with a \"pattern\"; "
                         "\"\": off)")


@dataclasses.dataclass(frozen=True)
class Verifier(Section):
    extraction: str = field(AUTO_EXTRACTION, f"answer extraction: {_EXTRACTIONS} (auto: the "
                            "reward type's reference default)", choices=EXTRACTION_CHOICES)
    gold: str = field(AUTO_EXTRACTION, "the gold of the RM's on-policy diagnostics and "
                      f"gold_accuracy: {_EXTRACTIONS} (auto: verifier.extraction's)",
                      choices=EXTRACTION_CHOICES)
    num_workers: int = field(2, "processes of the rule verifier", check=positive)
    timeout_s: float = field(5.0, "seconds one answer check may take", check=positive)
