"""Device mesh, logical-axis rules, sharded parameter creation ("pjit" style) and `host`, where
host-local rows become global arrays in multi-process runs."""
from coop_jax.parallel import host
from coop_jax.parallel.mesh import (
    AXES,
    LOGICAL_RULES,
    batch_sharding,
    batch_shardings,
    logical_sharding,
    make_mesh,
    maybe_initialize_distributed,
    param_shardings,
    place_on_mesh,
    replicated,
    shard_params,
    sharded_init,
)

__all__ = ["AXES", "LOGICAL_RULES", "batch_sharding", "batch_shardings", "host",
           "logical_sharding", "make_mesh",
           "maybe_initialize_distributed", "param_shardings", "place_on_mesh", "replicated", "shard_params",
           "sharded_init"]
