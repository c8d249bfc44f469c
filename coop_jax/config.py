"""The config schema (with defaults) and the checks that need no training code.

Config files under `configs/` call `base_config()` and override fields. `validate(config)` rejects
impossible settings of the schema with a message naming the field and the allowed values; the
names of the lower layers' registries (datasets, templates, RL options, kernels, schedules) are
checked here, and the training registries check their own fields (`rewards.validate_config`,
`cooper.validate_config`, called by `train.validate_config`). This module imports no training
code, so evaluation can read configs without it (`hf.build.model_config(config.model)` turns a
model section into a `ModelConfig`). `FIELD_DOCS` / `field_doc` describe every field in one line (what
the console scripts' `--print_config` shows).
"""
from __future__ import annotations

import ml_collections
from ml_collections.config_dict import placeholder

from coop_jax import data, kernels, rl
from coop_jax.models.config import DTYPES
from coop_jax.models.families import MODEL_FAMILIES
from coop_jax.models.lora import TARGETS as LORA_TARGETS
from coop_jax.monitor.settings import (FIELD_DOCS as MONITOR_FIELD_DOCS, MonitorSettings,
                                       monitor_section)
from coop_jax.optim import SCHEDULES, WEIGHT_DECAY_MASKS
from coop_jax.registry import Registry, chosen_by
from coop_jax.rm.input import QUESTION_FORMATS, TRUNCATIONS
from coop_jax.sampling.engine import ENGINES as ROLLOUT_ENGINES
from coop_jax.verify import EXTRACTION_MODES

NAN_POLICIES = ("error", "skip")
EVAL_HEADLINES = ("avg_at_k", "greedy")
# coop-train-rm's `rm_train` section
RM_TRAIN_MODES = Registry("rm_train.mode", {
    "build_triples": "sample a policy; label the completions by the rule verifier (and a judge)",
    "train": "train the RM with BCE on labelled triples"})
RM_OVERLONG = Registry("rm_train.overlong", {
    "drop": "leave out triples over rm_train.max_chars characters (the reference)",
    "truncate": "keep them; the tokens are cut to max_len on reward_model.truncation_side"})

# fields that must be > 0, and fields that may also be 0
_RM_POSITIVE = ("epochs", "batch_size", "micro_batches", "max_chars", "log_every",
                "samples_per_question", "judge_concurrency", "judge_max_tokens", "learning_rate")
_RM_NON_NEGATIVE = ("num_examples", "max_len", "max_prompt_len", "max_new_tokens",
                    "heldout_every", "checkpoint_every", "weight_decay", "grad_clip")
_RM_FRACTIONS = ("warmup_ratio", "heldout_fraction")  # in [0, 1)


# verifier.extraction: "auto" (the reward type's reference default, `rewards.extraction_mode`) or
# one of the verifier's modes
AUTO_EXTRACTION = "auto"
EXTRACTION_CHOICES = (AUTO_EXTRACTION,) + tuple(EXTRACTION_MODES)


def model_section(**overrides) -> ml_collections.ConfigDict:
    """A model section: either `hf_path` (HF folder, .gguf file or Hub id) or the architecture
    fields."""
    section = ml_collections.ConfigDict(dict(
        hf_path="", tokenizer="", family="qwen2", vocab_size=128, hidden_size=128,
        intermediate_size=384, num_layers=4, num_heads=4, num_kv_heads=2, head_dim=0,
        rope_theta=10000.0, rms_norm_eps=1e-6, qkv_bias=True, tie_embeddings=True,
        max_position_embeddings=512, param_dtype="float32", dtype="float32", remat=False,
        scan_layers=False,  # nn.scan over the layers: one compiled block (stacked params)
        keep_layers=0,  # with hf_path: keep only the first k decoder layers (0 = all)
    ))
    # LoRA in coop-train (models.lora): rank 0 = off (full fine-tuning); the update is scaled by
    # alpha / rank; dropout must be 0.0; targets: comma-separated projections (models.lora.TARGETS)
    section.lora = ml_collections.ConfigDict(dict(rank=0, alpha=32.0, dropout=0.0,
                                                  targets=",".join(LORA_TARGETS)))
    section.update(overrides)
    return section


def base_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.model = model_section()
    c.reward_model = model_section(  # for reward types with an RM (rewards.rm_reward_types)
        # the RM's input (coop_jax.rm.input): <question> = the full user prompt ("prompt", the
        # reference) or the raw question ("question"); an input over max_len tokens is cut on the
        # left (keeps the completion's end, where the score is read) or the right (the reference)
        question_format="prompt", truncation_side="left")

    c.data = ml_collections.ConfigDict(dict(
        dataset="synthetic", data_dir="", train_split="train", eval_split="test", num_train=0,
        num_eval=128, prompt_template="synthetic", chat_template=False, max_prompt_len=32,
        synthetic_train_size=20000, rephrase_field="rephrased",
    ))
    c.data.synthetic = ml_collections.ConfigDict(dict(
        num_operands_min=2, num_operands_max=3, max_operand=20, ops="+-", answer_format="####",
        surface="expression"))

    # Supervised warm start on reference solutions (0 steps = start RL from the loaded policy).
    c.sft = ml_collections.ConfigDict(dict(steps=0, batch_size=64, learning_rate=1e-3,
                                           warmup_steps=20, max_len=96, corrupt_fraction=0.0))

    # overlap: one-step off-policy rollouts; step t's update trains on rollouts of the policy
    # before update t-1, prepared on the host (decode, verify, pairs) while the device updates
    c.rollout = ml_collections.ConfigDict(dict(
        group_size=8, prompts_per_step=16, max_new_tokens=48, temperature=1.0, top_k=0,
        top_p=1.0, overlap=False, engine="static", slots=0, slot_halvings=3))  # see FIELD_DOCS

    # clip_ratio_c: dual-clip PPO's bound on negative-advantage tokens; unset: 3.0 for the
    # token-level PPO loss, as the references always apply it there, and none for GSPO or CISPO
    # (rl.default_clip_ratio_c); 0 = off. It acts only off-policy: several epochs or
    # mini-batches, or rollout.overlap. aggregation: rl.AGGREGATIONS (token_mean: the exact
    # mini-batch token mean, current verl's; micro_token_mean / token_sum_norm: the references'
    # per-micro-batch forms). kl_controller: the KL-in-reward coefficient's rule from step to
    # step (rl.KL_CONTROLLERS; adaptive: Ziegler et al.'s, with kl_target and kl_horizon)
    c.rl = ml_collections.ConfigDict(dict(
        advantage="grpo", aggregation="token_mean", policy_loss="ppo", clip_eps_low=0.2,
        clip_eps_high=0.2, clip_ratio_c=placeholder(float), ratio_level="token", kl_coef=0.001,
        kl_estimator="low_var_kl", kl_in_reward=False, kl_controller="fixed", kl_target=0.1,
        kl_horizon=10000, entropy_coef=0.0, ppo_epochs=1, num_minibatches=1,
        micro_batches=1,  # gradient accumulation within each mini-batch (lax.scan): same update
        dynamic_sampling=False, dynamic_max_draws=4, overlong="none", overlong_cache_len=8,
        overlong_factor=1.0, tis_cap=0.0,  # tis_cap: truncated importance sampling (0: off)
        # log KL(pi || pi_start) of each step's rollouts (kl_to_start, kl_to_start_seq), also with
        # kl_coef = 0: the start policy is kept as the reference (not with an EMA teacher)
        # the learner's shortcuts: docs/training.md
        log_kl_to_start=False, reuse_loss_forward=True, pad_buckets=4, share_prompt_prefix=True))

    c.optim = ml_collections.ConfigDict(dict(
        learning_rate=1e-6, warmup_steps=20, schedule="constant", weight_decay=0.01, b1=0.9,
        b2=0.999, eps=1e-8, grad_clip=1.0))

    c.reward = ml_collections.ConfigDict(dict(
        type="rule", threshold=False, hybrid_rm_weight=0.5,
        vote_match="exact"))  # voting rewards: "exact" strings (the references) | "no_whitespace"

    c.cooper = ml_collections.ConfigDict(dict(
        # warmup_ratio 0 and no_pair_step="zero_grad" (AdamW on zero gradients when a step has
        # no valid pair; "skip": no RM step) follow the reference's RM optimiser
        negative="rewrite", negative_check="reference", learning_rate=1e-5, warmup_ratio=0.0,
        no_pair_step="zero_grad", weight_decay=0.01, grad_clip=1.0, max_len=256,
        assistant_hf_path="", assistant_url="", assistant_model="", rewrite_temperature=0.7,
        rewrite_tries=3, rm_checkpoint="", heldout_triples="", heldout_every=10,
        pairs_per_group=1, pair_label_noise=0.0, reference_positive=False,
        pair_labels=AUTO_EXTRACTION, micro_batches=1))  # the RM's pair gradient accumulated over micro-batches (lax.scan)

    c.corewarding = ml_collections.ConfigDict(dict(a_start=0.01, a_end=1e-5, decay_steps=0))

    # hack probes (trainer.probes): JSONL triples of rule-wrong completions with a "pattern"
    # ("" = off): the RM's false-accept rate and the policy's log-likelihood per pattern
    # format_questions: format probes (trainer.probes.format_metrics; 0 = off)
    c.probes = ml_collections.ConfigDict(dict(triples="", every=0, format_questions=0))
    c.evals = "policy,rm_heldout,probes"  # trainer.evaluators, each at its own cadence field

    # extraction: auto (the reward type's reference default, rewards.REWARD_SOURCES) | lenient |
    # strict_boxed | strict_hash | strict_numeric (an integer literal after every answer marker:
    # the synthetic task's gold in configs/toy_hacking.py; the evaluation then also reports it,
    # "..._strict")
    c.verifier = ml_collections.ConfigDict(dict(num_workers=2, timeout_s=5.0, extraction="auto",
                                                gold=AUTO_EXTRACTION))  # the RM diagnostics' gold
    # shape: (data, fsdp, tensor), one -1 allowed. distributed: join a multi-process run
    # (parallel.maybe_initialize_distributed) with coordinator_address "host:port", num_processes
    # and process_id; unset ("", 0, -1) they come from COOP_COORDINATOR_ADDRESS /
    # COOP_NUM_PROCESSES / COOP_PROCESS_ID (set by coop_jax.launch.local), else JAX detects the
    # cluster (Cloud TPU, SLURM, ...). Give all three or none.
    c.mesh = ml_collections.ConfigDict(dict(shape=(-1, 1, 1), distributed=False,
                                            coordinator_address="", num_processes=0,
                                            process_id=-1))
    c.train = ml_collections.ConfigDict(dict(
        steps=100, log_every=1, eval_every=25, checkpoint_every=25, keep_checkpoints=3,
        nan_policy="error", max_nan_skips=10))
    # Every evaluation logs greedy accuracy and avg@k (k samples at temperature / top_p);
    # `headline` names the one summary.json leads with (the papers report avg@8, T 0.7, top-p 0.95).
    c.eval = ml_collections.ConfigDict(dict(headline="avg_at_k", k=8, temperature=0.7, top_p=0.95,
                                            batch_size=64))
    c.kernels = ml_collections.ConfigDict(dict(impl="auto"))
    c.rm_train = rm_train_section()
    c.monitor, c.wandb = monitor_section(), wandb_section()  # docs/monitor.md; both off
    return c


WANDB_MODES = ("", "online", "offline", "disabled")


def wandb_section() -> ml_collections.ConfigDict:
    """Weights & Biases logging of coop-train's metrics (`metrics_writer.MetricWriter`): off
    while `project` is empty."""
    return ml_collections.ConfigDict(dict(project="", mode="", dir=""))


def rm_train_section() -> ml_collections.ConfigDict:
    """coop-train-rm's settings (`--config.rm_train.x=y`). 0 / "" mean "from the rest of the
    config" (lengths from data / rollout / cooper, dataset from data). The optimiser's values are
    the paper's VerifyRM ones; the batch and lengths are CPU-sized (`configs/verifyrm.py` is the
    paper's recipe, docs/ALGORITHMS.md §1 lists the differences)."""
    return ml_collections.ConfigDict(dict(
        mode="",  # build_triples | train
        # build_triples: sample a policy, label by the rule verifier (and an optional judge)
        policy_checkpoint="", policy_hf="", dataset="", data_dir="", split="train",
        num_examples=0, samples_per_question=4, temperature=1.0, top_p=1.0, template="",
        chat=False, max_prompt_len=0, max_new_tokens=0, out="", heldout_fraction=0.0,
        heldout_out="", judge_url="", judge_model="", judge_max_tokens=1024,
        judge_concurrency=8,
        # train: BCE on labelled triples
        triples="", heldout="", workdir="", init_hf="", export_hf="", epochs=3,
        learning_rate=2e-5, weight_decay=0.01, warmup_ratio=0.0, schedule="linear",
        grad_clip=1.0,
        # all: decay every parameter | no_bias_norm: not biases or norm weights (HF Trainer's rule,
        # the VerifyRM reference)
        weight_decay_mask="all",
        # batch_size rows per AdamW step, their gradient accumulated over micro_batches (lax.scan)
        batch_size=16, micro_batches=1,
        # overlong: drop (the reference: leave out triples over max_chars characters) | truncate
        # (keep them; the tokens keep their last max_len)
        overlong="drop", max_chars=8000,
        # True: references / completions over 1,500 characters keep their first 500 and last
        # 1,000 in training, as every RL-time input (rm_input.truncate_middle); False: whole texts
        # (the reference's training). Held-out evaluation always uses the RL-time input.
        char_cut=True,
        max_len=0, log_every=10,
        heldout_every=0,  # also evaluate the held-out triples every N steps (0: per epoch only)
        # a resumable checkpoint (parameters, AdamW state, data position) every N steps; a rerun on
        # the same workdir resumes from the latest (0: only the final, parameters-only one)
        checkpoint_every=50,
        seed=0))


# ---------------------------------------------------------------------- one line per field
# What `--print_config` says about each field (tests/test_cli_help.py: every leaf of
# base_config() has one). A field chosen from a registry also lists its names (`field_doc`).
_MODEL_DOCS = {
    "hf_path": "HF folder, .gguf file or Hub id to load (then the architecture fields are unused)",
    "tokenizer": "tokenizer folder or Hub id (\"\": hf_path's, else the shipped char tokenizer)",
    "family": "architecture family of a random-init model (models.families)",
    "vocab_size": "vocabulary size (random init; the tokenizer's when larger)",
    "hidden_size": "width of the residual stream",
    "intermediate_size": "width of the MLP",
    "num_layers": "decoder layers",
    "num_heads": "query heads per layer",
    "num_kv_heads": "key / value heads per layer (grouped-query attention; divides num_heads)",
    "head_dim": "width of one head (0: hidden_size / num_heads)",
    "rope_theta": "RoPE base frequency",
    "rms_norm_eps": "epsilon of the RMSNorm layers",
    "qkv_bias": "biases on the q / k / v projections (Qwen2 style)",
    "tie_embeddings": "the output head reuses the input embedding",
    "max_position_embeddings": "longest sequence (prompt + response) the model takes",
    "param_dtype": "dtype of the stored parameters and the optimizer update",
    "dtype": "compute dtype of the forward pass",
    "remat": "recompute activations in the backward pass (less memory, more compute)",
    "scan_layers": "nn.scan over the layers: one compiled block, stacked parameters",
    "keep_layers": "with hf_path: keep only the first k decoder layers (0: all)",
    "lora.rank": "LoRA rank (0: off, full fine-tuning)",
    "lora.alpha": "LoRA scale: the update is multiplied by alpha / rank",
    "lora.dropout": "LoRA dropout (must be 0.0)",
    "lora.targets": "comma-separated projections that get adapters (models.lora.TARGETS)",
}
_RM_TRAIN_DOCS = {
    "mode": "build_triples (sample and label a policy's completions) | train (BCE on triples)",
    "policy_checkpoint": "build_triples: coop-train workdir of the sampling policy",
    "policy_hf": "build_triples: HF folder / .gguf / Hub id of the sampling policy",
    "dataset": "build_triples: dataset of the questions (\"\": data.dataset)",
    "data_dir": "build_triples: folder of its split files (\"\": data.data_dir)",
    "split": "build_triples: split to sample on",
    "num_examples": "build_triples: first N questions (0: all)",
    "samples_per_question": "build_triples: completions sampled per question",
    "temperature": "build_triples: sampling temperature",
    "top_p": "build_triples: nucleus sampling threshold",
    "template": "build_triples: prompt template (\"\": the checkpoint's or the dataset's)",
    "chat": "build_triples: wrap prompts in the tokenizer's chat template",
    "max_prompt_len": "build_triples: prompt tokens (0: data.max_prompt_len)",
    "max_new_tokens": "build_triples: response tokens (0: rollout.max_new_tokens)",
    "out": "build_triples: the triples JSONL to write",
    "heldout_fraction": "build_triples: fraction of questions set aside as held-out triples",
    "heldout_out": "build_triples: JSONL of the held-out triples",
    "judge_url": "build_triples: OpenAI-compatible endpoint of an LLM judge (\"\": rule only)",
    "judge_model": "build_triples: the judge's model name",
    "judge_max_tokens": "build_triples: tokens of one judge reply",
    "judge_concurrency": "build_triples: judge requests in flight",
    "triples": "train: labelled triples JSONL to train on",
    "heldout": "train: held-out triples JSONL to evaluate on",
    "workdir": "train: output folder (checkpoints/, rm_metrics.jsonl, rm_summary.json)",
    "init_hf": "train: HF model to start the RM from (\"\": the reward_model section)",
    "export_hf": "train: also write the trained RM as an HF folder here",
    "epochs": "train: passes over the triples",
    "learning_rate": "train: AdamW peak learning rate",
    "weight_decay": "train: AdamW weight decay",
    "warmup_ratio": "train: fraction of the steps spent warming up the learning rate",
    "schedule": "train: learning-rate schedule after the warm-up (as optim.schedule)",
    "grad_clip": "train: global gradient-norm clip (0: off)",
    "weight_decay_mask": "train: parameters that decay (no_bias_norm: not biases / norms)",
    "batch_size": "train: triples per AdamW step",
    "micro_batches": "train: gradient accumulation within a step (lax.scan)",
    "overlong": "train: triples over max_chars: drop (the reference) | truncate",
    "max_chars": "train: longest triple in characters",
    "char_cut": "train: texts over 1,500 characters keep first 500 + last 1,000 (as at RL time)",
    "max_len": "train: RM input tokens (0: cooper.max_len)",
    "log_every": "train: log every N steps",
    "heldout_every": "train: also evaluate the held-out triples every N steps (0: per epoch)",
    "checkpoint_every": "train: resumable checkpoint every N steps (0: only the final one)",
    "seed": "seed of the shuffles, the held-out split and the sampling",
}
FIELD_DOCS: dict[str, str] = {
    "seed": "seed of the data order, sampling and random init",
    **{f"model.{k}": f"policy: {v}" for k, v in _MODEL_DOCS.items()},
    **{f"reward_model.{k}": f"reward model: {v}" for k, v in _MODEL_DOCS.items()},
    "reward_model.question_format": f"the RM input's <question>: {' | '.join(QUESTION_FORMATS)} "
                                    "(the full user prompt | the raw question)",
    "reward_model.truncation_side": f"an RM input over max_len tokens loses its "
                                    f"{' | '.join(TRUNCATIONS)} end",
    "data.dataset": "the task: its problems and splits",
    "data.data_dir": "folder with <split>.jsonl or <dataset>/<split>.jsonl (file datasets)",
    "data.train_split": "split trained on",
    "data.eval_split": "split of the held-out evaluation",
    "data.num_train": "first N training problems (0: all; file datasets)",
    "data.num_eval": "held-out problems evaluated (0: all)",
    "data.prompt_template": "how a question becomes the prompt",
    "data.chat_template": "wrap prompts in the tokenizer's chat template",
    "data.max_prompt_len": "prompt tokens (longer prompts are cut)",
    "data.synthetic_train_size": "synthetic: training problems generated",
    "data.rephrase_field": "record field holding the rephrased question (corewarding_1)",
    "data.synthetic.num_operands_min": "synthetic: fewest operands of a problem (>= 2)",
    "data.synthetic.num_operands_max": "synthetic: most operands of a problem",
    "data.synthetic.max_operand": "synthetic: largest operand",
    "data.synthetic.ops": "synthetic: operators used, distinct characters of '+-*'",
    "data.synthetic.answer_format": "synthetic: final answer as '#### n' | '\\boxed{n}' (boxed)",
    "data.synthetic.surface": "synthetic: bare expression | short word problem (words)",
    "sft.steps": "supervised warm-up steps on reference solutions (0: none)",
    "sft.batch_size": "SFT examples per step",
    "sft.learning_rate": "SFT peak learning rate",
    "sft.warmup_steps": "SFT learning-rate warm-up steps",
    "sft.max_len": "SFT sequence tokens (prompt + solution)",
    "sft.corrupt_fraction": "fraction of SFT demonstrations with an off-by-one final answer",
    "rollout.group_size": "completions sampled per prompt (the group of GRPO-family advantages)",
    "rollout.prompts_per_step": "prompts per step (rows = prompts_per_step x group_size)",
    "rollout.max_new_tokens": "response tokens",
    "rollout.temperature": "sampling temperature",
    "rollout.top_k": "top-k sampling (0: off)",
    "rollout.top_p": "nucleus sampling threshold (1: off)",
    "rollout.overlap": "one-step off-policy: sample step t+1 while step t updates",
    "rollout.engine": "static (all rows in lock step) | continuous (decode slots refilled as "
                      "rows finish: sampling.engine)",
    "rollout.slots": "continuous engine: decode slots (0: one per row of the step)",
    "rollout.slot_halvings": "continuous engine: how many times the slots may halve once the "
                             "queue is empty and half of them are idle (0: never)",
    "rl.advantage": "advantage estimator",
    "rl.aggregation": "how token losses are averaged into the loss",
    "rl.clip_eps_low": "PPO ratio clip below 1 (1 - eps)",
    "rl.clip_eps_high": "PPO ratio clip above 1 (1 + eps; DAPO clip-higher when > low)",
    "rl.policy_loss": "per-token surrogate: ppo (clipped) | cispo (clipped weights)",
    "rl.clip_ratio_c": "dual-clip bound on negative-advantage tokens (0: off; unset: 3 for "
                       "token-level ppo, off otherwise)",
    "rl.ratio_level": "importance ratio per token | per sequence (GSPO)",
    "rl.kl_coef": "weight of the KL penalty to the reference policy (0: none)",
    "rl.kl_estimator": "KL estimator",
    "rl.kl_in_reward": "subtract the KL from the rewards instead of adding it to the loss",
    "rl.kl_controller": "KL-in-reward coefficient: fixed (rl.kl_coef) | adaptive",
    "rl.kl_target": "adaptive KL controller: the KL it steers toward",
    "rl.kl_horizon": "adaptive KL controller: its horizon in rollouts",
    "rl.entropy_coef": "entropy bonus weight",
    "rl.tis_cap": "truncated importance sampling: weigh each token's loss by min(pi_learner / "
                  "pi_sampler, cap), the sampler's log-probs kept with the rollouts (0: off)",
    "rl.ppo_epochs": "passes over each step's rollouts",
    "rl.num_minibatches": "optimizer updates per pass (divides the step's rows)",
    "rl.micro_batches": "gradient accumulation within a mini-batch (lax.scan; same update)",
    "rl.dynamic_sampling": "DAPO: drop groups with equal rewards and draw more prompts",
    "rl.dynamic_max_draws": "dynamic sampling: most draws per step",
    "rl.overlong": "treatment of truncated responses",
    "rl.overlong_cache_len": "overlong penalty: tokens before max_new_tokens where it ramps up",
    "rl.overlong_factor": "overlong penalty: its largest value",
    "rl.log_kl_to_start": "log KL(pi || pi_start) of the rollouts (kl_to_start), also with "
                          "kl_coef 0",
    "rl.reuse_loss_forward": "on-policy steps: old log-probs from the loss forward, no second "
                             "pass",
    "rl.pad_buckets": "learner: padding cut to the batch's longest, rounded up to one of this "
                      "many lengths per axis (0: full lengths)",
    "rl.share_prompt_prefix": "learner: each prompt's forward runs once for its group's "
                              "rollouts, which attend to its keys and values; with "
                              "rl.pad_buckets, the RM's inputs likewise share their group's "
                              "(question, reference) tokens",
    "optim.learning_rate": "policy AdamW peak learning rate",
    "optim.warmup_steps": "policy learning-rate warm-up steps",
    "optim.schedule": "policy learning-rate schedule after the warm-up",
    "optim.weight_decay": "policy AdamW weight decay",
    "optim.b1": "AdamW beta1",
    "optim.b2": "AdamW beta2",
    "optim.eps": "AdamW epsilon",
    "optim.grad_clip": "policy global gradient-norm clip (0: off)",
    "reward.type": "where the rewards come from (rewards.REWARD_SOURCES)",
    "reward.threshold": "RM rewards: 1[sigmoid > 0.5] instead of the sigmoid",
    "reward.hybrid_rm_weight": "hybrid: weight w of the RM in rule * (1 - w) + w * sigmoid(RM)",
    "reward.vote_match": "voting rewards: how two answers match (rewards.ANSWER_MATCHES)",
    "cooper.negative": "how a pair's negative is made (cooper.NEGATIVE_STRATEGIES)",
    "cooper.negative_check": "how a made negative is verified wrong (cooper.KEEP_RULES)",
    "cooper.learning_rate": "RM AdamW learning rate",
    "cooper.warmup_ratio": "fraction of the run spent warming up the RM learning rate",
    "cooper.no_pair_step": "a step without a valid pair: zero_grad (AdamW on zeros) | skip",
    "cooper.weight_decay": "RM AdamW weight decay",
    "cooper.grad_clip": "RM global gradient-norm clip (0: off)",
    "cooper.max_len": "RM input tokens",
    "cooper.assistant_hf_path": "rewrite: local HF causal LM that writes the negatives",
    "cooper.assistant_url": "rewrite: OpenAI-compatible endpoint that writes the negatives",
    "cooper.assistant_model": "rewrite: the endpoint's model name",
    "cooper.rewrite_temperature": "rewrite: the assistant's sampling temperature",
    "cooper.rewrite_tries": "rewrite: attempts per negative",
    "cooper.rm_checkpoint": "start the RM from this coop-train / coop-train-rm workdir",
    "cooper.heldout_triples": "JSONL of triples the RM is evaluated on during training",
    "cooper.heldout_every": "evaluate the RM on heldout_triples every N steps",
    "cooper.pairs_per_group": "pairs per group: the k highest-scored wrong rollouts, one pair "
                              "each (needs an on-device negative, rollout_hardest)",
    "cooper.reference_positive": "a group with no correct rollout takes its record's reference "
                                 "solution as the positive (beyond the paper)",
    "cooper.pair_label_noise": "probability that a pair's positive and negative are swapped "
                               "(0.5: the sham-Cooper control)",
    "cooper.micro_batches": "the RM's pair gradient accumulated over micro-batches",
    "cooper.pair_labels": f"the rule that labels the pairs' rollouts right or wrong: "
                          f"{' | '.join(EXTRACTION_CHOICES)} (auto: verifier.extraction's)",
    "corewarding.a_start": "corewarding_2: teacher EMA rate at the start (cosine decay)",
    "corewarding.a_end": "corewarding_2: teacher EMA rate at the end",
    "corewarding.decay_steps": "corewarding_2: steps of the decay (0: train.steps)",
    "evals": "the run's evaluations, comma-separated (trainer.evaluators.EVALUATORS: policy, "
             "rm_heldout, probes), each at its own cadence field",
    "probes.triples": "JSONL of hack probes (rule-wrong completions with a \"pattern\"; \"\": off)",
    "probes.every": "log the probes' RM false-accept rate and policy log-likelihood every N steps "
                    "(0: step 0 and the last only)",
    "probes.format_questions": "format probes: right and wrong answers to this many held-out "
                               "questions in several forms (#### N, The answer is: N, bare, "
                               "boxed, repeated); the RM's mean score per form (0: off)",
    "verifier.num_workers": "processes of the rule verifier",
    "verifier.timeout_s": "seconds one answer check may take",
    "verifier.extraction": f"answer extraction: {' | '.join(EXTRACTION_CHOICES)} (auto: the "
                           "reward type's reference default)",
    "verifier.gold": f"the gold of the RM's on-policy diagnostics and gold_accuracy: "
                     f"{' | '.join(EXTRACTION_CHOICES)} (auto: verifier.extraction's)",
    "mesh.shape": "device mesh (data, fsdp, tensor); one -1 takes the remaining devices",
    "mesh.distributed": "join a multi-process run (jax.distributed)",
    "mesh.coordinator_address": "host:port of process 0 (\"\": environment / auto-detect)",
    "mesh.num_processes": "processes of the run (0: environment / auto-detect)",
    "mesh.process_id": "this process's index (-1: environment / auto-detect)",
    "train.steps": "RL steps",
    "train.log_every": "log metrics every N steps",
    "train.eval_every": "evaluate on the held-out split every N steps",
    "train.checkpoint_every": "save a checkpoint every N steps",
    "train.keep_checkpoints": "newest checkpoints kept",
    "train.nan_policy": f"a non-finite loss: {' | '.join(NAN_POLICIES)} (stop | drop the update)",
    "train.max_nan_skips": "skip: most updates dropped before the run stops",
    "eval.headline": f"the summary's headline metric: {' | '.join(EVAL_HEADLINES)}",
    "eval.k": "samples per problem for avg@k / pass@k",
    "eval.temperature": "avg@k sampling temperature",
    "eval.top_p": "avg@k nucleus sampling threshold",
    "eval.batch_size": "prompts per evaluation batch",
    "kernels.impl": "kernel implementation of sampling and log-probs",
    **{f"rm_train.{k}": v for k, v in _RM_TRAIN_DOCS.items()},
    **{f"monitor.{k}": v for k, v in MONITOR_FIELD_DOCS.items()},
    "wandb.project": "Weights & Biases project to log every step's metrics to (\"\": no W&B); "
                     "the run is named after the workdir, a resumed run continues it",
    "wandb.mode": "W&B mode: \"\" (W&B's own, WANDB_MODE) | online | offline (no network or "
                  "account; `wandb sync` uploads later) | disabled",
    "wandb.dir": "folder of the W&B run files (\"\": the workdir)",
}


def field_doc(path: str) -> str:
    """The one-line description of config field `path` (dotted, "rl.advantage"), with the names
    its registry allows when a registry chooses it ("" for an unknown field)."""
    doc = FIELD_DOCS.get(path, "")
    registry = chosen_by(path) or chosen_by(path.replace("reward_model.", "model.", 1))
    if registry is not None and not all(name in doc for name in registry):
        doc += f" (one of: {', '.join(registry)})"
    return doc


def _one_of(value, allowed, field):
    if value not in allowed:
        raise ValueError(f"config.{field} must be one of {list(allowed)}, got {value!r}")


def _positive(value, field, allow_zero=False):
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"config.{field} must be {bound}, got {value!r}")


def _validate_policy_loss(r) -> None:
    _one_of(r.policy_loss, tuple(rl.POLICY_LOSSES), "rl.policy_loss")
    rl.check_policy_loss(r.policy_loss, r.ratio_level, "config.rl.")
    if r.clip_ratio_c is not None and r.clip_ratio_c != 0 and not r.clip_ratio_c > 1:
        raise ValueError(f"config.rl.clip_ratio_c must be 0 (off) or > 1, got {r.clip_ratio_c!r}")
    _one_of(r.kl_controller, tuple(rl.KL_CONTROLLERS), "rl.kl_controller")
    if r.kl_controller != "fixed":
        if not r.kl_in_reward:
            raise ValueError(f"config.rl.kl_controller={r.kl_controller!r} steers the KL in the "
                             "reward: it needs rl.kl_in_reward=True")
        _positive(r.kl_target, "rl.kl_target")
        _positive(r.kl_horizon, "rl.kl_horizon")


def _validate_lora(lora, field: str) -> None:
    _int_field(lora.rank, f"{field}.rank", 0)
    if not lora.rank:
        return
    _positive(lora.alpha, f"{field}.alpha")
    if lora.dropout != 0:
        raise ValueError(f"config.{field}.dropout must be 0.0 (LoRA dropout is not supported: "
                         f"the sampler and the step's old / reference log-probs would each see "
                         f"another function), got {lora.dropout!r}")
    targets = [t.strip() for t in str(lora.targets).split(",") if t.strip()]
    unknown = [t for t in targets if t not in LORA_TARGETS]
    if unknown or not targets:
        raise ValueError(f"config.{field}.targets must be comma-separated names of "
                         f"{list(LORA_TARGETS)}, got {lora.targets!r}")


def validate_model_section(section, field: str) -> None:
    """Raise ValueError naming the first impossible field of a model section."""
    _positive(section.keep_layers, f"{field}.keep_layers", allow_zero=True)
    _validate_lora(section.lora, f"{field}.lora")
    if section.hf_path:
        return
    for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                 "num_kv_heads"):
        _positive(section[name], f"{field}.{name}")
    if section.num_heads % section.num_kv_heads:
        raise ValueError(f"config.{field}.num_heads ({section.num_heads}) must be a multiple of "
                         f"{field}.num_kv_heads ({section.num_kv_heads})")
    _one_of(section.param_dtype, tuple(DTYPES), f"{field}.param_dtype")
    _one_of(section.dtype, tuple(DTYPES), f"{field}.dtype")
    MODEL_FAMILIES.check(section.family, f"{field}.family")


def _int_field(value, field, minimum):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"config.{field} must be an integer >= {minimum}, got {value!r}")


def _validate_distributed(mesh) -> None:
    """The multi-process fields."""
    if not isinstance(mesh.distributed, bool):
        raise ValueError(f"config.mesh.distributed must be True or False, got "
                         f"{mesh.distributed!r}")
    address = mesh.coordinator_address
    host, _, port = address.rpartition(":") if isinstance(address, str) else ("", "", "")
    if not isinstance(address, str) or (address and not (host and port.isdigit()
                                                          and 0 < int(port) < 65536)):
        raise ValueError(f"config.mesh.coordinator_address must be 'host:port' (or \"\" for the "
                         f"environment / cluster auto-detection), got {address!r}")
    num, pid = mesh.num_processes, mesh.process_id
    _int_field(num, "mesh.num_processes", 0)
    _int_field(pid, "mesh.process_id", -1)
    if num and pid >= num:
        raise ValueError(f"config.mesh.process_id ({pid}) must be < mesh.num_processes ({num})")


def _check_complete(c, schema, prefix: str = "") -> None:
    """Every field of the schema is present (defaults live in `base_config` only, so a config
    that replaced a section must keep all of its fields)."""
    for key, default in schema.items():
        if key not in c:
            raise ValueError(f"config.{prefix}{key} is missing (a config must start from "
                             "coop_jax.config.base_config() and override fields)")
        if isinstance(default, ml_collections.ConfigDict) and isinstance(
                c[key], ml_collections.ConfigDict):
            _check_complete(c[key], default, f"{prefix}{key}.")


def validate(c: ml_collections.ConfigDict, device_count: int | None = None) -> None:
    """Raise ValueError naming the first impossible field."""
    _check_complete(c, base_config())
    validate_model_section(c.model, "model")
    _one_of(c.reward_model.question_format, tuple(QUESTION_FORMATS), "reward_model.question_format")
    _one_of(c.reward_model.truncation_side, tuple(TRUNCATIONS), "reward_model.truncation_side")
    _one_of(c.data.dataset, data.DATASETS, "data.dataset")
    _one_of(c.data.prompt_template, data.PROMPT_TEMPLATES, "data.prompt_template")
    if not c.data.data_dir and data.sources.needs_data_dir(c.data.dataset):  # else: the Hub copy
        raise ValueError(f"config.data.data_dir is required for data.dataset={c.data.dataset!r}")
    _positive(c.data.max_prompt_len, "data.max_prompt_len")
    _positive(c.data.num_eval, "data.num_eval", allow_zero=True)
    if c.rollout.group_size < 2:
        raise ValueError(f"config.rollout.group_size must be >= 2 (group-relative advantages), "
                         f"got {c.rollout.group_size}")
    _positive(c.rollout.prompts_per_step, "rollout.prompts_per_step")
    _positive(c.rollout.max_new_tokens, "rollout.max_new_tokens")
    _positive(c.rollout.temperature, "rollout.temperature")
    if not 0 < c.rollout.top_p <= 1:
        raise ValueError(f"config.rollout.top_p must be in (0, 1], got {c.rollout.top_p}")
    _positive(c.rollout.top_k, "rollout.top_k", allow_zero=True)
    _one_of(c.rollout.engine, ROLLOUT_ENGINES, "rollout.engine")
    _positive(c.rollout.slots, "rollout.slots", allow_zero=True)
    _positive(c.rollout.slot_halvings, "rollout.slot_halvings", allow_zero=True)
    _one_of(c.rl.advantage, tuple(rl.ADVANTAGES), "rl.advantage")
    _one_of(c.rl.aggregation, tuple(rl.AGGREGATIONS), "rl.aggregation")
    _one_of(c.rl.kl_estimator, tuple(rl.KL_ESTIMATORS), "rl.kl_estimator")
    _one_of(c.rl.ratio_level, ("token", "sequence"), "rl.ratio_level")
    _validate_policy_loss(c.rl)
    _one_of(c.rl.overlong, tuple(rl.OVERLONG), "rl.overlong")
    _positive(c.rl.kl_coef, "rl.kl_coef", allow_zero=True)
    _positive(c.rl.ppo_epochs, "rl.ppo_epochs")
    _positive(c.rl.num_minibatches, "rl.num_minibatches")
    rows = c.rollout.prompts_per_step * c.rollout.group_size
    if rows % c.rl.num_minibatches:
        raise ValueError(f"config.rl.num_minibatches ({c.rl.num_minibatches}) must divide "
                         f"prompts_per_step * group_size ({rows})")
    _positive(c.rl.micro_batches, "rl.micro_batches")
    _positive(c.rl.pad_buckets, "rl.pad_buckets", allow_zero=True)
    _positive(c.rl.tis_cap, "rl.tis_cap", allow_zero=True)
    _one_of(c.optim.schedule, SCHEDULES, "optim.schedule")
    _positive(c.optim.learning_rate, "optim.learning_rate")
    _one_of(c.cooper.no_pair_step, ("zero_grad", "skip"), "cooper.no_pair_step")
    _positive(c.cooper.micro_batches, "cooper.micro_batches")
    _positive(c.probes.every, "probes.every", allow_zero=True)
    if c.rollout.prompts_per_step % c.cooper.micro_batches:
        raise ValueError(f"config.cooper.micro_batches ({c.cooper.micro_batches}) must divide "
                         f"rollout.prompts_per_step ({c.rollout.prompts_per_step}): one pair "
                         "per prompt")
    _positive(c.verifier.num_workers, "verifier.num_workers")
    _positive(c.verifier.timeout_s, "verifier.timeout_s")
    _one_of(c.verifier.extraction, EXTRACTION_CHOICES, "verifier.extraction")
    _one_of(c.verifier.gold, EXTRACTION_CHOICES, "verifier.gold")
    _one_of(c.cooper.pair_labels, EXTRACTION_CHOICES, "cooper.pair_labels")
    _positive(c.probes.format_questions, "probes.format_questions", allow_zero=True)
    _one_of(c.train.nan_policy, NAN_POLICIES, "train.nan_policy")
    _one_of(c.eval.headline, EVAL_HEADLINES, "eval.headline")
    _positive(c.eval.k, "eval.k")
    _positive(c.eval.temperature, "eval.temperature")
    if not 0 < c.eval.top_p <= 1:
        raise ValueError(f"config.eval.top_p must be in (0, 1], got {c.eval.top_p}")
    _one_of(c.kernels.impl, kernels.IMPLS, "kernels.impl")
    MonitorSettings.from_dict(c.monitor)  # one line naming config.monitor.<field>
    _one_of(c.wandb.mode, WANDB_MODES, "wandb.mode")
    _positive(c.train.steps, "train.steps", allow_zero=True)
    shape = tuple(c.mesh.shape)
    if len(shape) != 3 or sum(1 for s in shape if s == -1) > 1 or any(
            s == 0 or s < -1 for s in shape):
        raise ValueError(f"config.mesh.shape must be three ints (data, fsdp, tensor) with at most "
                         f"one -1, got {shape}")
    _validate_distributed(c.mesh)
    if device_count is not None:
        data_size, fsdp, _ = resolve_mesh_shape(shape, device_count)
        if (c.rollout.prompts_per_step * c.rollout.group_size) % (data_size * fsdp):
            raise ValueError(f"config.rollout.prompts_per_step x group_size ({rows}) must be a "
                             f"multiple of the mesh's data x fsdp size ({data_size * fsdp})")
    if c.rollout.overlap and c.rl.dynamic_sampling:
        raise ValueError("config.rollout.overlap does not support rl.dynamic_sampling=True (its "
                         "draw count depends on the rewards, so the next batch cannot be sampled "
                         "ahead); set one of them to False")


def validate_rm_train(r: ml_collections.ConfigDict) -> None:
    """Raise ValueError naming the first impossible (or missing) `rm_train` field."""
    _check_complete(r, rm_train_section(), "rm_train.")
    for name, registry in (("mode", RM_TRAIN_MODES), ("overlong", RM_OVERLONG),
                           ("schedule", SCHEDULES),
                           ("weight_decay_mask", WEIGHT_DECAY_MASKS)):
        registry.check(r[name], f"rm_train.{name}")
    for name in _RM_POSITIVE:
        if not r[name] > 0:
            raise ValueError(f"config.rm_train.{name} must be > 0, got {r[name]!r}")
    for name in _RM_NON_NEGATIVE:
        if r[name] < 0:
            raise ValueError(f"config.rm_train.{name} must be >= 0, got {r[name]!r}")
    for name in _RM_FRACTIONS:
        if not 0 <= r[name] < 1:
            raise ValueError(f"config.rm_train.{name} must be in [0, 1), got {r[name]}")
    if not isinstance(r.char_cut, bool):
        raise ValueError(f"config.rm_train.char_cut must be True or False, got {r.char_cut!r}")


def resolve_mesh_shape(shape, device_count: int) -> tuple[int, int, int]:
    """Fill a -1 entry with the remaining devices and check the product."""
    shape = [int(s) for s in shape]
    known = 1
    for s in shape:
        known *= s if s != -1 else 1
    if -1 in shape:
        if device_count % known:
            raise ValueError(f"config.mesh.shape {tuple(shape)} does not divide the "
                             f"{device_count} devices")
        shape[shape.index(-1)] = device_count // known
    if shape[0] * shape[1] * shape[2] != device_count:
        raise ValueError(f"config.mesh.shape {tuple(shape)} needs {shape[0] * shape[1] * shape[2]} "
                         f"devices but there are {device_count}")
    return tuple(shape)


def load_config_file(path: str) -> ml_collections.ConfigDict:
    """`get_config()` of a config file as written (no command-line overrides)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("coop_jax_config_file", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()
