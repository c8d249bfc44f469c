"""Orbax checkpoints of the training state: exact round trip, retention, shardings kept on
restore, atomicity under SIGKILL mid-save, and `load_model` for export / evaluation."""
from __future__ import annotations

import glob
import os
import pathlib
import signal
import subprocess
import sys
import time

import flax.linen as nn
import jax
import numpy as np
import pytest

from conftest import TESTS, tiny_model_config
from coop_jax import checkpoint, models, parallel
from coop_jax.optim import make_optimizer
from coop_jax.trainer.step import TrainState, init_state, place_state

CFG = tiny_model_config(vocab_size=64, num_heads=4, num_kv_heads=2, family="llama",
                        rope_theta=500000.0,
                        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 64})
RM_CFG = CFG.replace(num_labels=1, rope_scaling=None, family="qwen2", qkv_bias=True)
TX, RM_TX = make_optimizer(1e-3), make_optimizer(1e-4, weight_decay=0.01)
BIG_FLOATS = 75_000_000  # ~300 MB of float32: a save that takes long enough to be killed
TMP_GLOB = "*.orbax-checkpoint-tmp*"  # orbax's in-progress step directories


def _random_tree(tree, rng: np.random.Generator):
    """Same structure; floats ~ N(0, 1), ints a fixed count (no jit, nothing to compile)."""
    def fill(x):
        if np.issubdtype(x.dtype, np.floating):
            return rng.standard_normal(x.shape).astype(x.dtype)
        return np.full(x.shape, 7, x.dtype)
    return jax.tree_util.tree_map(fill, tree)


def small_state(seed: int) -> TrainState:
    """A TrainState with policy, Adam moments, KL reference and RM all filled from `seed`."""
    rng = np.random.default_rng(seed)
    params = lambda cfg: _random_tree(nn.meta.unbox(models.abstract_params(cfg)), rng)
    state = init_state(params(CFG), TX, ref_params=params(CFG), rm_params=params(RM_CFG),
                       rm_tx=RM_TX)
    return state.replace(policy=state.policy.replace(opt_state=_random_tree(
                             state.policy.opt_state, rng)),
                         rm=state.rm.replace(opt_state=_random_tree(state.rm.opt_state, rng)))


def meta(step: int) -> dict:
    return {"step": step, "data": {"epoch": 1, "order": [3, 1, 2], "position": step * 8},
            "initial_accuracy": 0.25, "note": None, "resumed": False,
            "policy_model_config": checkpoint.model_config_to_dict(CFG),
            "rm_model_config": checkpoint.model_config_to_dict(RM_CFG)}


def _template() -> TrainState:
    """Restore target: right structure, shapes and dtypes, wrong values."""
    return jax.tree_util.tree_map(lambda x: np.zeros_like(x), small_state(0))


def _assert_trees_equal(a, b) -> None:
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        assert np.asarray(x).dtype == np.asarray(y).dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _assert_state_equal(restored: TrainState, expected: TrainState, step: int) -> None:
    assert int(restored.step) == step
    _assert_trees_equal(restored.policy, expected.policy)
    _assert_trees_equal(restored.ref_params, expected.ref_params)
    _assert_trees_equal(restored.rm, expected.rm)


def test_round_trip_meta_and_retention(tmp_path):
    ckpt = checkpoint.Checkpointer(str(tmp_path), keep=2)
    with pytest.raises(FileNotFoundError):
        ckpt.restore(_template())
    assert ckpt.latest_step() is None and ckpt.all_steps() == []
    states = {step: small_state(step) for step in (1, 2, 3)}
    for step, state in states.items():
        ckpt.save(step, state, meta(step))
    assert ckpt.all_steps() == [2, 3] and ckpt.latest_step() == 3
    assert sorted(os.listdir(tmp_path)) == ["2", "3"]

    restored, got_meta = ckpt.restore(_template())
    _assert_state_equal(restored, states[3], 3)
    assert got_meta == meta(3)
    restored, got_meta = ckpt.restore(_template(), step=2)
    _assert_state_equal(restored, states[2], 2)
    assert got_meta == meta(2) and ckpt.read_meta(2) == meta(2) and ckpt.read_meta() == meta(3)
    _assert_trees_equal(ckpt.load_item("ref_params"), states[3].ref_params)
    with pytest.raises(ValueError, match="item"):
        ckpt.load_item("optimizer")
    ckpt.close()


def test_state_without_ref_or_rm(tmp_path):
    state = small_state(4)
    state = state.replace(ref_params=None, rm=None)
    ckpt = checkpoint.Checkpointer(str(tmp_path))
    ckpt.save(4, state, {"step": 4})
    restored, got_meta = ckpt.restore(jax.tree_util.tree_map(np.zeros_like, state))
    assert got_meta == {"step": 4} and restored.ref_params is None and restored.rm is None
    _assert_trees_equal(restored.policy, state.policy)
    ckpt.close()


def test_a_moving_kl_coefficient_is_saved_and_restored(tmp_path):
    # rl.kl_controller=adaptive keeps the KL-in-reward coefficient in the state: a resumed run
    # goes on from the coefficient it had reached, not from rl.kl_coef
    state = small_state(5).replace(ref_params=None, rm=None, kl_coef=np.float32(0.0123))
    ckpt = checkpoint.Checkpointer(str(tmp_path))
    ckpt.save(5, state, {"step": 5})
    restored, _ = ckpt.restore(state.replace(kl_coef=np.float32(0.5)))
    assert float(restored.kl_coef) == np.float32(0.0123)
    assert float(ckpt.load_item("kl_coef", 5)["coef"]) == np.float32(0.0123)
    ckpt.close()


def test_host_items_round_trip_as_numpy(tmp_path):
    """`save(host_items=...)`: further numpy trees (rollout.overlap's pending rollouts) beside the
    state, read back alone by `load_host_item`."""
    state = small_state(5).replace(ref_params=None, rm=None)
    pending = {"views": [{"tokens": np.arange(6, dtype=np.int32).reshape(2, 3),
                          "logprobs": np.linspace(-2, 0, 6, dtype=np.float32).reshape(2, 3),
                          "truncated": np.array([True, False])}]}
    ckpt = checkpoint.Checkpointer(str(tmp_path))
    ckpt.save(5, state, {"step": 5}, host_items={"pending_rollouts": pending})
    restored, _ = ckpt.restore(jax.tree_util.tree_map(np.zeros_like, state))
    _assert_trees_equal(restored.policy, state.policy)
    got = ckpt.load_host_item("pending_rollouts")
    _assert_trees_equal(got, pending)
    assert all(isinstance(x, np.ndarray) for x in jax.tree_util.tree_leaves(got))
    ckpt.close()


def test_meta_without_step_round_trips(tmp_path):
    """The restored step is the checkpoint's step; meta is free-form (no required keys)."""
    state = small_state(9).replace(ref_params=None, rm=None)
    ckpt = checkpoint.Checkpointer(str(tmp_path))
    ckpt.save(9, state, {"data": {"position": 3}})
    restored, got_meta = ckpt.restore(jax.tree_util.tree_map(np.zeros_like, state))
    assert got_meta == {"data": {"position": 3}} and int(restored.step) == 9
    ckpt.close()


@pytest.fixture(scope="module")
def mesh():
    return parallel.make_mesh((2, 2, 2))


def _sharded(state: TrainState, mesh) -> TrainState:
    shard = lambda tree, cfg: parallel.shard_params(tree, cfg, mesh)
    state = state.replace(policy=state.policy.replace(params=shard(state.policy.params, CFG)),
                          ref_params=shard(state.ref_params, CFG),
                          rm=state.rm.replace(params=shard(state.rm.params, RM_CFG)))
    return place_state(state, mesh)



def test_a_protected_step_outlives_the_rotation(tmp_path):
    """keep=2 rotates steps out, except the step given to `protect` (a monitor alarm's)."""
    ckpt = checkpoint.Checkpointer(str(tmp_path), keep=2)
    ckpt.protect(2)
    for step in (1, 2, 3, 4, 5):
        ckpt.save(step, small_state(step), meta(step))
    assert ckpt.all_steps() == [2, 4, 5]
    restored, _ = ckpt.restore(_template(), step=2)
    _assert_state_equal(restored, small_state(2), 2)
    ckpt.close()

def test_restore_keeps_target_shardings(tmp_path, mesh):
    state = _sharded(small_state(5), mesh)
    ckpt = checkpoint.Checkpointer(str(tmp_path))
    ckpt.save(5, state, meta(5))
    target = _sharded(_template(), mesh)
    restored, _ = ckpt.restore(target)
    _assert_state_equal(restored, state, 5)
    sharded_specs = set()
    for name in ("policy", "ref_params", "rm"):
        for got, want in zip(jax.tree_util.tree_leaves(getattr(restored, name)),
                             jax.tree_util.tree_leaves(getattr(target, name))):
            assert isinstance(got.sharding, jax.sharding.NamedSharding), name
            assert got.sharding.mesh == mesh and got.sharding.spec == want.sharding.spec, name
            sharded_specs.add(got.sharding.spec)
    # the comparison covers really sharded leaves, not only replicated ones
    assert jax.sharding.PartitionSpec("fsdp", "tensor") in sharded_specs
    ckpt.close()


def test_saving_small_replicated_arrays_compiles_nothing(tmp_path, mesh):
    """Arrays under a megabyte a replica are written by their first replica, not sliced between
    replicas (one compiled slice program per shape, seconds on the first save of a process)."""
    from jax.sharding import NamedSharding, PartitionSpec as P
    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, secs, **kw: compiles.append(event)
        if event == "/jax/core/compile/backend_compile_duration" else None)
    tree = {f"a{n}": jax.device_put(np.arange(n * 8, dtype=np.float32).reshape(n, 8),
                                    NamedSharding(mesh, P(None, "tensor")))
            for n in range(3, 13)}
    big = np.ones((256, 2048), np.float32)  # 1 MiB a replica over the 2 x 2 replicas
    tree["big"] = jax.device_put(big, NamedSharding(mesh, P(None, "tensor")))
    ckpt = checkpoint.Checkpointer(str(tmp_path))
    before = len(compiles)
    ckpt.save_items(1, {"tree": tree}, {"step": 1})
    small_compiles = len(compiles) - before
    restored, _ = ckpt.restore_items({"tree": tree}, 1)
    ckpt.close()
    assert small_compiles <= 1, small_compiles  # the large array's one slice program at most
    for name, value in tree.items():
        np.testing.assert_array_equal(np.asarray(restored["tree"][name]), np.asarray(value), name)


CHILD = """
import sys
import numpy as np
sys.path[:0] = sys.argv[2:]  # this test's folder and tests/ (conftest)
import test_checkpoint as T
from coop_jax import checkpoint
from coop_jax.optim import ModelState
from coop_jax.trainer.step import TrainState

ckpt = checkpoint.Checkpointer(sys.argv[1], keep=3)
ckpt.save(1, T.small_state(1), T.meta(1))
big = {"big": np.random.default_rng(0).random(T.BIG_FLOATS, dtype=np.float32)}
state = TrainState(np.zeros((), np.int32), ModelState(big, T.small_state(1).policy.opt_state))
print("saving 2", flush=True)
ckpt.save(2, state, T.meta(2))
print("saved 2", flush=True)
"""


def _kill_during_second_save(directory: pathlib.Path, delay: float) -> bool:
    """Run CHILD, SIGKILL it `delay` s after step 2's temporary directory appears.

    True when it died mid-write (temporary directory left, step 2 not finalized)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    log = directory.parent / f"{directory.name}.stderr"
    with open(log, "w") as stderr:  # a file, not a pipe: a chatty child cannot block on it
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(directory),
                                  os.path.dirname(__file__), str(TESTS)],
                                 stdout=subprocess.PIPE,
                                 stderr=stderr, text=True, env=env)
    try:
        line = child.stdout.readline()
        assert line.strip() == "saving 2", f"child failed before step 2: {log.read_text()}"
        deadline = time.monotonic() + 60
        while not glob.glob(str(directory / ("2" + TMP_GLOB[1:]))) and child.poll() is None:
            assert time.monotonic() < deadline, "no temporary directory for step 2"
            time.sleep(0.005)
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.communicate()
    if child.returncode == 0:  # the save finished (and the child exited) before the kill
        return False
    assert child.returncode == -signal.SIGKILL, log.read_text()
    return not (directory / "2").exists() and bool(glob.glob(str(directory / TMP_GLOB)))


def test_sigkill_during_save_leaves_previous_step(tmp_path):
    for attempt, delay in enumerate((0.3, 0.05, 0.0)):
        directory = tmp_path / f"attempt{attempt}"
        if _kill_during_second_save(directory, delay):
            break  # else the 300 MB save finished within `delay`: kill earlier
    else:
        pytest.fail("could not kill the child while step 2 was being written")

    ckpt = checkpoint.Checkpointer(str(directory), keep=3)
    # the partial step-2 directory is still there, and not taken for a checkpoint
    assert glob.glob(str(directory / TMP_GLOB))
    assert ckpt.latest_step() == 1 and ckpt.all_steps() == [1]
    restored, got_meta = ckpt.restore(_template())
    _assert_state_equal(restored, small_state(1), 1)
    assert got_meta == meta(1)
    # a new save of the same step is not blocked by the stale temporary directory
    ckpt.save(2, small_state(2), meta(2))
    assert ckpt.all_steps() == [1, 2]
    _assert_state_equal(ckpt.restore(_template())[0], small_state(2), 2)
    assert not glob.glob(str(directory / TMP_GLOB))
    ckpt.close()


def test_load_model_from_workdir(tmp_path):
    state = small_state(6)
    ckpt = checkpoint.Checkpointer(str(tmp_path / "run" / "checkpoints"))
    ckpt.save(6, state, meta(6))
    ckpt.close()
    cfg, params, got_meta = checkpoint.load_model(str(tmp_path / "run"), "policy")
    assert cfg == CFG and cfg.rope_scaling_dict["rope_type"] == "llama3"
    assert got_meta == meta(6)
    _assert_trees_equal(params, state.policy.params)
    cfg, params, _ = checkpoint.load_model(str(tmp_path / "run" / "checkpoints"), "rm")
    assert cfg == RM_CFG
    _assert_trees_equal(params, state.rm.params)
    with pytest.raises(ValueError, match="which"):
        checkpoint.load_model(str(tmp_path / "run"), "critic")


def test_the_kernel_choice_is_the_loading_runs():
    """A saved model config leaves out the run's kernel choice (`ModelConfig.kernel_impl`):
    one saved before the field existed, or by a run on other kernels, loads with the default,
    equal to the architecture it describes."""
    saved = checkpoint.model_config_to_dict(CFG.with_kernels("xla"))
    assert saved == checkpoint.model_config_to_dict(CFG) and "kernel_impl" not in saved
    loaded = checkpoint.model_config_from_dict(saved)
    assert loaded == CFG and loaded.kernel_impl == "auto"


def test_load_model_without_rm_config(tmp_path):
    ckpt = checkpoint.Checkpointer(str(tmp_path))
    ckpt.save(0, small_state(7), {"step": 0,
                                  "policy_model_config": checkpoint.model_config_to_dict(CFG)})
    ckpt.close()
    with pytest.raises(ValueError, match="no rm model"):
        checkpoint.load_model(str(tmp_path), "rm")


LOAD_CHILD = """
import sys
import jax
import numpy as np
from coop_jax import checkpoint

assert jax.device_count() == 1
cfg, params, _ = checkpoint.load_model(sys.argv[1], "policy")
expected = np.load(sys.argv[2])
for path, leaf in jax.tree_util.tree_leaves_with_path(params):
    np.testing.assert_array_equal(np.asarray(leaf), expected[jax.tree_util.keystr(path)])
print("ok")
"""


def test_load_model_on_another_topology(tmp_path, mesh):
    """Train on a mesh, evaluate / export in a one-device process (`coop-eval`, `hf` export)."""
    state = _sharded(small_state(8), mesh)
    ckpt = checkpoint.Checkpointer(str(tmp_path / "run" / "checkpoints"))
    ckpt.save(8, state, meta(8))
    ckpt.close()
    np.savez(tmp_path / "expected.npz", **{jax.tree_util.keystr(p): np.asarray(x) for p, x in
                                           jax.tree_util.tree_leaves_with_path(
                                               state.policy.params)})
    flags = " ".join(f for f in os.environ.get("XLA_FLAGS", "").split()
                     if "xla_force_host_platform_device_count" not in f)
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=flags)
    out = subprocess.run([sys.executable, "-c", LOAD_CHILD, str(tmp_path / "run"),
                          str(tmp_path / "expected.npz")], capture_output=True, text=True,
                         env=env)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
