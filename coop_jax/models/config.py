"""Architecture description shared by every model family (`coop_jax.models.families`)."""
from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from coop_jax.kernels import IMPLS
from coop_jax.models.families import MODEL_FAMILIES
from coop_jax.models.lora import LoraConfig

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
RUN_CHOICE = "run_choice"  # metadata key of the fields a run chooses, not saved with the model


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of one decoder-only transformer.

    `num_labels == 0` is a causal LM (unembedding to the vocabulary); `num_labels >= 1` is a
    sequence-classification model whose scalar head is read at the last non-pad token.

    `lora` (a `models.lora.LoraConfig`, or None) adds low-rank adapters to the targeted
    projections (parameters `lora_a`, `lora_b` beside their kernels); fresh adapters change
    nothing (B = 0). The decoder reads every field but `family`. `family` (a name in
    `coop_jax.models.families.MODEL_FAMILIES`) is the Hugging Face architecture these fields
    come from and are exported as; it never changes the maths. On import it decides how
    config.json sets the `qkv_bias` / `o_bias` / `mlp_bias` switches (qwen2: q/k/v bias always,
    none elsewhere; llama: `attention_bias`, `mlp_bias`) and which keys are refused; on export
    the `model_type`, the `architectures` name and those bias keys.

    `kernel_impl` (a `coop_jax.kernels.IMPLS` name) is how this run computes the model's
    log-probs and samples: the run's `kernels.impl`, set once where the run builds the config
    (`with_kernels`). It is part of the config's identity (compiled functions keyed on the
    config differ by it) but not of the model: checkpoints leave it out (a `RUN_CHOICE` field,
    see `saved_fields`), as does the HF config.json, so a loaded config takes the loading run's
    choice.
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int | None = None
    rope_theta: float = 10000.0
    # None, or {"rope_type": "llama3", "factor", "low_freq_factor", "high_freq_factor",
    # "original_max_position_embeddings"} as in HF configs.
    rope_scaling: tuple[tuple[str, Any], ...] | None = None
    rms_norm_eps: float = 1e-6
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    tie_embeddings: bool = False
    max_position_embeddings: int = 4096
    num_labels: int = 0
    family: str = "qwen2"  # a MODEL_FAMILIES name: the HF format (not the maths); see above
    param_dtype: str = "float32"
    dtype: str = "float32"
    remat: bool = False
    # one nn.scan over the layers (params["layers"], stacked on a leading axis) instead of
    # params["layers_{i}"]: the same maths, one compiled block; see `models.stack_layers`
    scan_layers: bool = False
    lora: LoraConfig | None = None  # low-rank adapters (models.lora); None: none
    kernel_impl: str = dataclasses.field(default="auto", metadata={RUN_CHOICE: True})

    def __post_init__(self):
        if isinstance(self.lora, dict):  # from a checkpoint's JSON meta
            object.__setattr__(self, "lora", LoraConfig(**self.lora))
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                     "num_kv_heads"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"ModelConfig.{name} must be positive, got {getattr(self, name)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"ModelConfig.num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads})")
        if self.head_dim is None and self.hidden_size % self.num_heads:
            raise ValueError("ModelConfig.hidden_size must be divisible by num_heads when head_dim "
                             "is not given")
        for name in ("param_dtype", "dtype"):
            if getattr(self, name) not in DTYPES:
                raise ValueError(f"ModelConfig.{name} must be one of {sorted(DTYPES)}, got "
                                 f"{getattr(self, name)!r}")
        MODEL_FAMILIES.lookup(self.family, "ModelConfig.family")
        IMPLS.lookup(self.kernel_impl, "ModelConfig.kernel_impl")
        if isinstance(self.rope_scaling, dict):
            object.__setattr__(self, "rope_scaling", tuple(sorted(self.rope_scaling.items())))

    @property
    def dim_per_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def jnp_dtype(self):
        return DTYPES[self.dtype]

    @property
    def jnp_param_dtype(self):
        return DTYPES[self.param_dtype]

    @property
    def rope_scaling_dict(self) -> dict[str, Any] | None:
        return dict(self.rope_scaling) if self.rope_scaling else None

    @property
    def is_reward_model(self) -> bool:
        return self.num_labels > 0

    def replace(self, **kw) -> "ModelConfig":
        return dataclasses.replace(self, **kw)

    def with_kernels(self, impl: str) -> "ModelConfig":
        """This config computing its log-probs and samples with `impl` (the run's
        `kernels.impl`)."""
        return self.replace(kernel_impl=impl)

    def saved_fields(self) -> dict[str, Any]:
        """The fields that describe the model (`dataclasses.asdict`, without the run's
        choices): what a checkpoint saves."""
        run_choices = [f.name for f in dataclasses.fields(self) if f.metadata.get(RUN_CHOICE)]
        saved = dataclasses.asdict(self)
        for name in run_choices:
            del saved[name]
        return saved
