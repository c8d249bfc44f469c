"""Compile the Pallas Mosaic-TPU kernels and the train step for real TPU chips, on a CPU host.

Interpret mode (the test suite) runs the kernels' maths but not Mosaic's compiler: VMEM limits,
layouts and the partitioning of a multi-chip program only show up when libtpu compiles them.
`jax.experimental.topologies.get_topology_desc` describes real TPU slices without hardware, so
`jit(...).lower(abstract inputs).compile()` runs that compiler here. Three parts:

  kernels  single chip of v4, v5e, v5p and v6e; fp32 and bf16; N = 4096 rows, D = 1536,
           V = 151,936 (Qwen2.5): fused_logprobs forward, forward + gradient, and fused_sample
           (top-k 50, top-p 0.95) over a decode batch of 512 rows; tiles are the kernels'
           VMEM-derived defaults (printed);
  mesh     v5e:2x2 and v5e:4x4 slices, several (data, fsdp, tensor) meshes, vocabulary
           replicated (tensor = 1) or split (tensor > 1): the kernels alone (bf16, same shapes,
           shard_map-partitioned) and a tiny-model GRPO train step (jit_step) with
           kernels.impl = "pallas_tpu";
  sampler  v5e:2x2 and v5e:4x4 slices: both rollout engines, the static KV-cache sampler
           (`sampling.generate`) and the continuous-batching one (`generate_continuous`, 32
           decode slots for the 64 rows), at Qwen2.5-1.5B shapes and the rollout sizes of configs/qwen2_5_1_5b_gsm8k.py, parameters sharded as
           the trainer shards them, with kernels.impl = "auto" resolved for the mesh's platform
           (what a TPU host's jax.default_backend() says; this host's is cpu).

Every row checks that the compiled program holds the Mosaic kernels (tpu_custom_call) and
reports its temporaries (memory_analysis). Prints a table; exits 1 if anything failed. Needs
jax[tpu] (libtpu) at the project's jax version:

    python -m venv --system-site-packages /tmp/tpuvenv
    /tmp/tpuvenv/bin/pip install "jax[tpu]==$(python -c 'import jax; print(jax.__version__)')"
    /tmp/tpuvenv/bin/python benchmarks/tpu_compile.py [--only kernels,mesh,step,sampler] \
        [--json out.json]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
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

from coop_jax import models, parallel, rl, sampling  # noqa: E402
from coop_jax.hf.build import model_config  # noqa: E402
from coop_jax.kernels import fused_logprobs, fused_sample, pallas_tpu, partition  # noqa: E402
from coop_jax.optim import make_optimizer  # noqa: E402
from coop_jax.trainer.batch import TrainBatch  # noqa: E402
from coop_jax.trainer.step import StepConfig, init_state, jit_step  # noqa: E402

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
# the sampler part: FSDP meshes like the config's (2, 4, 1), on 4 and 16 chips
SAMPLER_MESHES = {"v5e:2x2": [(1, 4, 1)], "v5e:4x4": [(4, 4, 1)]}
# (rollout.engine, greedy, holds a Mosaic kernel) compiled by the sampler part. The continuous
# engine at T > 0 draws each row from its own key, which the one-key Pallas sampling kernel
# cannot, so its sampling head is XLA's; at temperature 0 (no key read) it keeps the kernel.
ENGINES = (("static", False, True), ("continuous", False, False), ("continuous", True, True))
ENGINE_SLOTS = 32  # half the config's 64 rows, so slots are refilled
QWEN_EOS, QWEN_PAD = (151_645, 151_643), 151_643  # <|im_end|>, <|endoftext|>
PARTS = ("kernels", "mesh", "step", "sampler")


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


def _compile(fn, args, mosaic: bool = True) -> tuple[float, int, float | None]:
    """(compile seconds, Mosaic kernels in the compiled program, its temporaries in GiB);
    `mosaic`: the program must hold a Mosaic kernel."""
    start = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    seconds = time.perf_counter() - start
    kernels = compiled.as_text().count(MARKER)
    if mosaic and not kernels:
        raise RuntimeError("no Mosaic kernel in the compiled program")
    memory = compiled.memory_analysis()
    temp = None if memory is None else memory.temp_size_in_bytes / 2 ** 30
    return seconds, kernels, temp


def _row(row: dict, fn, args, mosaic: bool = True) -> dict:
    try:
        seconds, kernels, temp = _compile(fn, args, mosaic)
        row.update(ok=True, seconds=round(seconds, 1), kernels=kernels,
                   temp_gib=None if temp is None else round(temp, 4))
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


def _abstract_batch(mesh) -> TrainBatch:
    rows = GROUP * PROMPTS
    shapes = {"prompt_tokens": ((rows, PROMPT_LEN), np.int32),
              "prompt_mask": ((rows, PROMPT_LEN), np.bool_),
              "tokens": ((rows, RESPONSE_LEN), np.int32), "mask": ((rows, RESPONSE_LEN), np.bool_),
              "rewards": ((rows,), np.float32), "reward_bonus": ((rows,), np.float32),
              "loss_weight": ((rows,), np.float32)}
    host = {k: np.zeros(s, d) for k, (s, d) in shapes.items()}
    shardings = parallel.batch_shardings(host, mesh)
    return TrainBatch.from_flat({k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=shardings[k])
                                 for k, v in host.items()})


def train_step_program(mesh):
    # the shipped configs' learner: each prompt runs once per group (rl.share_prompt_prefix)
    cfg = StepConfig(policy=TINY.with_kernels("pallas_tpu"), loss=rl.LossConfig(kl_coef=0.01),
                     group_size=GROUP, num_minibatches=2, valid_vocab=TINY.vocab_size - 5,
                     share_prompt_prefix=True)
    tx = make_optimizer(1e-5, warmup_steps=0)
    state, batch = _abstract_train_state(cfg, tx, mesh), _abstract_batch(mesh)
    step = jit_step(cfg, tx, state_shardings=jax.tree_util.tree_map(lambda x: x.sharding, state),
                    batch_sharding=jax.tree_util.tree_map(lambda x: x.sharding, batch),
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


def _memory_plan():
    """benchmarks/memory_plan.py (the config loader with the Hub architectures)."""
    path = pathlib.Path(__file__).resolve().parent / "memory_plan.py"
    spec = importlib.util.spec_from_file_location("memory_plan", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sampler_program(mesh, engine: str = "static", greedy: bool = False):
    """(generate, abstract args, note): the trainer's rollout sampler of the Qwen2.5-1.5B GSM8K
    config on `mesh`, kernels.impl = "auto" resolved for the platform of the mesh's devices;
    `engine` as `rollout.engine` (continuous: ENGINE_SLOTS decode slots for all the rows);
    `greedy`: temperature 0 instead of the config's."""
    plan = _memory_plan()
    config = plan.load_config(plan.DEFAULT_CONFIG)
    cfg, r = model_config(config.model), config.rollout
    scfg = sampling.SamplingConfig(
        max_new_tokens=r.max_new_tokens, eos_ids=QWEN_EOS, pad_id=QWEN_PAD,
        temperature=0.0 if greedy else r.temperature, top_k=r.top_k, top_p=r.top_p,
        num_samples=r.group_size, valid_vocab=plan.VALID_VOCAB)
    platform = mesh.devices.flat[0].platform
    if platform != "tpu":
        raise RuntimeError(f"the sampler compile needs TPU devices, got {platform}")
    sds = lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s)
    params = jax.tree_util.tree_map(sds, nn.meta.unbox(models.abstract_params(cfg)),
                                    parallel.param_shardings(cfg, mesh))
    shape = (r.prompts_per_step, config.data.max_prompt_len)
    host = {"ids": np.zeros(shape, np.int32), "mask": np.zeros(shape, np.bool_)}
    shardings = parallel.batch_shardings(host, mesh)  # replicated where B < data x fsdp
    key = sds(jax.eval_shape(lambda: jax.random.key(0)), parallel.replicated(mesh))

    def sample(params, ids, mask, key):
        # A TPU host resolves auto to pallas_tpu only on a mesh (with several devices, else
        # xla); the backend override stands in for its jax.default_backend() and nothing else.
        hidden = jnp.zeros((r.prompts_per_step * r.group_size, cfg.hidden_size))
        if partition.layout(hidden, models.unembed_matrix(params, cfg)) is None:
            raise RuntimeError("the sampler's unembedding is not on the mesh")
        if engine == "continuous":
            return sampling.generate_continuous(params, cfg, scfg, ids, mask, key,
                                                slots=ENGINE_SLOTS, backend=platform)
        return sampling.generate(params, cfg, scfg, ids, mask, key, backend=platform)

    split = "batch-sharded" if shardings["ids"].spec != P() else "replicated"
    slots = (f", {ENGINE_SLOTS} slots" if engine == "continuous" else "") + (
        ", greedy" if greedy else f", T={r.temperature}")
    note = (f"Qwen2.5-1.5B {cfg.dtype}, {r.prompts_per_step}x{r.group_size} rows{slots}, "
            f"{shape[1]}+{r.max_new_tokens} tokens, prompts {split}, impl auto -> {platform}")
    return sample, (params, sds(host["ids"], shardings["ids"]),
                    sds(host["mask"], shardings["mask"]), key), note


def sampler_part() -> list[dict]:
    from jax.experimental import topologies
    rows = []
    for topo, shapes in SAMPLER_MESHES.items():
        devices = topologies.get_topology_desc(topo, "tpu").devices
        for shape in shapes:
            for engine, greedy, mosaic in ENGINES:
                mesh = parallel.make_mesh(shape, devices)
                fn, args, note = sampler_program(mesh, engine, greedy)
                rows.append(_row(dict(part="sampler", chip=topo, mesh=str(shape), dtype="bf16",
                                      program=f"{engine} sampler (auto)", note=note), fn, args,
                                 mosaic))
    return rows


def _fmt(row: dict) -> str:
    gib = row.get("temp_gib")
    temp = "" if gib is None else (f" temp {gib:.2f} GiB" if gib >= 0.01
                                   else f" temp {gib * 1024:.1f} MiB")
    status = (f"ok {row['seconds']:6.1f}s {row['kernels']:3d} kernels{temp}" if row["ok"]
              else f"FAIL {row['error']}")
    return (f"| {row['chip']:<16} | {row['mesh']:<9} | {row['dtype']:<4} | {row['program']:<15} "
            f"| {status} | {row.get('note', '')} |")


def _parts(value: str) -> set[str]:
    parts = {p.strip() for p in value.split(",") if p.strip()}
    if not parts or parts - set(PARTS):
        raise argparse.ArgumentTypeError(f"--only takes a comma-separated subset of {PARTS}, "
                                         f"got {value!r}")
    return parts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", type=_parts, default=set(PARTS) - {"step"},
                        help="comma-separated parts of " + ",".join(PARTS) + " (default all; "
                             "step: only the train step of the mesh part; .ci/run compiles "
                             "step,sampler)")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    a = parser.parse_args(argv)
    print(f"jax {jax.__version__}; N={N} D={D} V={V}")
    print("| chip             | mesh      | dtype | program        | compile | note |")
    start = time.perf_counter()
    rows = []
    if "kernels" in a.only:
        rows += kernels_part()
    if a.only & {"mesh", "step"}:
        rows += mesh_part(kernels="mesh" in a.only)
    if "sampler" in a.only:
        rows += sampler_part()
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
