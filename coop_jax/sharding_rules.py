"""The mesh's axes and the logical sharding rules: which mesh axes each logical dimension name
("embed", "heads", "batch", ...) of a parameter or activation is split over. Shared by the models
(their partition specs), the kernels (how their inputs are split) and `coop_jax.parallel` (the
shardings); it imports nothing from coop_jax, so none of them depends on another for it.
"""

AXES = ("data", "fsdp", "tensor")

LOGICAL_RULES: tuple[tuple[str, object], ...] = (
    ("batch", ("data", "fsdp")),
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("mlp", "tensor"),
    ("labels", None),
    ("layers", None),  # the stacked layer axis of `model.scan_layers`
    ("lora_rank", None),  # LoRA adapters' rank axis (models.lora)
    ("norm", None),
    ("seq", None),
    ("act_embed", None),
)
