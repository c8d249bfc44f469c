"""Compile the Pallas Mosaic-TPU kernels and the train step for real TPU chips, on a CPU host.

Interpret mode (the test suite) runs the kernels' maths but not Mosaic's compiler: VMEM limits,
layouts and the partitioning of a multi-chip program only show up when libtpu compiles them.
`jax.experimental.topologies.get_topology_desc` describes real TPU slices without hardware, so
`jit(...).lower(abstract inputs).compile()` runs that compiler here. Two parts:

  kernels  single chip of v4, v5e, v5p and v6e; fp32 and bf16; N = 4096 rows, D = 1536,
           V = 151,936 (Qwen2.5): fused_logprobs forward, forward + gradient, and fused_sample
           (top-k 50, top-p 0.95) over a decode batch of 512 rows; tiles are the kernels'
           VMEM-derived defaults (printed);
  mesh     v5e:2x2 and v5e:4x4 slices, several (data, fsdp, tensor) meshes, vocabulary
           replicated (tensor = 1) or split (tensor > 1): the kernels alone (bf16, same shapes,
           shard_map-partitioned) and a tiny-model GRPO train step (jit_step) with
           kernels.impl = "pallas_tpu".

Every row checks that the compiled program holds the Mosaic kernels (tpu_custom_call). Prints a
table; exits 1 if anything failed. Needs jax[tpu] (libtpu) at the project's jax version:

    python -m venv --system-site-packages /tmp/tpuvenv
    /tmp/tpuvenv/bin/pip install "jax[tpu]==$(python -c 'import jax; print(jax.__version__)')"
    /tmp/tpuvenv/bin/python benchmarks/tpu_compile.py [--only kernels|mesh|step] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the host backend; the targets are topologies
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # other processes may hold libtpu

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

from coop_jax import models, parallel, rl  # noqa: E402
from coop_jax.kernels import fused_logprobs, fused_sample, pallas_tpu  # noqa: E402
from coop_jax.train_step import StepConfig, init_state, jit_step, make_optimizer  # noqa: E402

N, D, V = 4096, 1536, 151_936
DECODE_ROWS = 512
TOP_K, TOP_P = 50, 0.95
GENERATIONS = {"v4": "v4:2x2x1", "v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2"}
MESHES = {"v5e:2x2": [(1, 4, 1), (1, 2, 2)], "v5e:4x4": [(4, 4, 1), (2, 4, 2)]}
DTYPES = {"fp32": jnp.float32, "bf16": jnp.bfloat16}
MARKER = "tpu_custom_call"
# tiny policy for the train step: vocab split evenly over tensor <= 2
TINY = models.ModelConfig(vocab_size=2048, hidden_size=256, intermediate_size=512, num_layers=2,
                          num_heads=4, num_kv_heads=2, tie_embeddings=True)
GROUP, PROMPTS, PROMPT_LEN, RESPONSE_LEN = 4, 8, 32, 32


def _sds(shape, dtype, mesh, *spec):
    return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, P(*spec)))


def kernel_programs(mesh, dtype, rows: tuple | None = None, vocab=None) -> dict:
    """name -> (function, abstract args) for the fused kernels on `mesh`."""
    h = _sds((N, D), dtype, mesh, rows)
    w = _sds((D, V), dtype, mesh, None, vocab)
    tgt = _sds((N,), jnp.int32, mesh, rows)
    hb = _sds((DECODE_ROWS, D), dtype, mesh, rows)
    temp = _sds((DECODE_ROWS,), jnp.float32, mesh, rows)
    key = _sds((2,), jnp.uint32, mesh)

    def fwd(h, w, t):
        return fused_logprobs(h, w, t, impl="pallas_tpu")

    def fwd_grad(h, w, t):
        def loss(h, w):
            logp, ent = fused_logprobs(h, w, t, impl="pallas_tpu")
            return jnp.sum(logp) + 0.01 * jnp.sum(ent)
        return jax.value_and_grad(loss, argnums=(0, 1))(h, w)

    def sample(key, h, w, temp):
        return fused_sample(key, h, w, temp, TOP_K, TOP_P, impl="pallas_tpu")

    return {"forward": (fwd, (h, w, tgt)), "forward+grad": (fwd_grad, (h, w, tgt)),
            "sampler": (sample, (key, hb, w, temp))}


def _compile(fn, args) -> tuple[float, int]:
    """(compile seconds, Mosaic kernels in the compiled program)."""
    start = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    kernels = compiled.as_text().count(MARKER)
    if not kernels:
        raise RuntimeError("no Mosaic kernel in the compiled program")
    return time.perf_counter() - start, kernels


def _row(row: dict, fn, args) -> dict:
    try:
        seconds, kernels = _compile(fn, args)
        row.update(ok=True, seconds=round(seconds, 1), kernels=kernels)
    except Exception as e:  # noqa: BLE001 - report every failure, keep going
        msg = str(e).strip().splitlines()
        row.update(ok=False, error=f"{type(e).__name__}: {msg[0][:160] if msg else ''}",
                   detail=traceback.format_exc(limit=3))
    print(_fmt(row), flush=True)
    return row


def _tiles(mesh, dtype, rows: int) -> str:
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):  # the chip get_tpu_info reads
        capacity = pallas_tpu.vmem_capacity()
    tiles = {k: pallas_tpu.choose_tiles(k, DECODE_ROWS if k == "sample" else rows, D, dtype,
                                        capacity) for k in ("fwd", "dh", "dw", "sample")}
    return (f"VMEM {capacity >> 20} MiB: " +
            " ".join(f"{k} {bn}x{bv}" for k, (bn, bv) in tiles.items()))


def kernels_part() -> list[dict]:
    from jax.experimental import topologies
    rows = []
    for gen, topo in GENERATIONS.items():
        device = topologies.get_topology_desc(topo, "tpu").devices[0]
        mesh = parallel.make_mesh((1, 1, 1), [device])
        for dname, dtype in DTYPES.items():
            note = _tiles(mesh, dtype, N)
            for name, (fn, args) in kernel_programs(mesh, dtype).items():
                rows.append(_row(dict(part="kernels", chip=f"{gen} ({device.device_kind})",
                                      mesh="1 chip", dtype=dname, program=name, note=note),
                                 fn, args))
    return rows


def _abstract_train_state(cfg: StepConfig, tx, mesh):
    shardings = parallel.param_shardings(cfg.policy, mesh)
    rep = parallel.replicated(mesh)
    sds = lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s)
    params = jax.tree_util.tree_map(sds, nn.meta.unbox(models.abstract_params(cfg.policy)),
                                    shardings)
    opt_state = optax.tree_map_params(tx, sds, jax.eval_shape(tx.init, params), shardings,
                                      transform_non_params=lambda x: sds(x, rep))
    state = jax.eval_shape(lambda: init_state(params, tx, ref_params=params))
    return state.replace(step=sds(state.step, rep),
                         policy=state.policy.replace(params=params, opt_state=opt_state),
                         ref_params=params)


def _abstract_batch(mesh) -> dict:
    rows = GROUP * PROMPTS
    shapes = {"prompt_tokens": ((rows, PROMPT_LEN), np.int32),
              "prompt_mask": ((rows, PROMPT_LEN), np.bool_),
              "tokens": ((rows, RESPONSE_LEN), np.int32), "mask": ((rows, RESPONSE_LEN), np.bool_),
              "rewards": ((rows,), np.float32), "loss_weight": ((rows,), np.float32)}
    host = {k: np.zeros(s, d) for k, (s, d) in shapes.items()}
    shardings = parallel.batch_shardings(host, mesh)
    return {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=shardings[k])
            for k, v in host.items()}


def train_step_program(mesh):
    cfg = StepConfig(policy=TINY, loss=rl.LossConfig(kl_coef=0.01), group_size=GROUP,
                     num_minibatches=2, kernel_impl="pallas_tpu", valid_vocab=TINY.vocab_size - 5)
    tx = make_optimizer(1e-5, warmup_steps=0)
    state, batch = _abstract_train_state(cfg, tx, mesh), _abstract_batch(mesh)
    step = jit_step(cfg, tx, state_shardings=jax.tree_util.tree_map(lambda x: x.sharding, state),
                    batch_sharding={k: v.sharding for k, v in batch.items()},
                    replicated=parallel.replicated(mesh), donate=False)
    return step, (state, batch)


def mesh_part(kernels: bool = True) -> list[dict]:
    """Rows for every mesh of MESHES: the kernels alone (unless ``kernels`` is False) and the
    train step."""
    from jax.experimental import topologies
    rows = []
    for topo, shapes in MESHES.items():
        devices = topologies.get_topology_desc(topo, "tpu").devices
        for shape in shapes:
            mesh = parallel.make_mesh(shape, devices)
            base = dict(part="mesh", chip=topo, mesh=str(shape), dtype="bf16")
            programs = kernel_programs(mesh, jnp.bfloat16, ("data", "fsdp"), "tensor")
            for name, (fn, args) in (programs.items() if kernels else ()):
                if name == "forward":
                    continue  # covered by forward+grad
                rows.append(_row(dict(base, program=name, note="hidden rows over (data, fsdp), "
                                      "unembed [D, V] over (-, tensor)"), fn, args))
            step, args = train_step_program(mesh)
            rows.append(_row(dict(base, dtype="fp32", program="GRPO train step",
                                  note=f"tiny policy V={TINY.vocab_size}, "
                                       f"{GROUP * PROMPTS}x({PROMPT_LEN}+{RESPONSE_LEN}) tokens"),
                             step, args))
    return rows


def _fmt(row: dict) -> str:
    status = (f"ok {row['seconds']:6.1f}s {row['kernels']:3d} kernels" if row["ok"]
              else f"FAIL {row['error']}")
    return (f"| {row['chip']:<16} | {row['mesh']:<9} | {row['dtype']:<4} | {row['program']:<15} "
            f"| {status} | {row.get('note', '')} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("kernels", "mesh", "step"),
                        help="step: only the train step on every mesh (what .ci/run compiles)")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    a = parser.parse_args(argv)
    print(f"jax {jax.__version__}; N={N} D={D} V={V}")
    print("| chip             | mesh      | dtype | program        | compile | note |")
    start = time.perf_counter()
    rows = []
    if a.only in (None, "kernels"):
        rows += kernels_part()
    if a.only in (None, "mesh", "step"):
        rows += mesh_part(kernels=a.only != "step")
    failed = [r for r in rows if not r["ok"]]
    print(f"{len(rows) - len(failed)}/{len(rows)} compiled in {time.perf_counter() - start:.0f} s")
    for r in failed:
        print(f"\nFAILED {r['chip']} {r['mesh']} {r['dtype']} {r['program']}:\n{r['detail']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
