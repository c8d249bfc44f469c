"""Multi-process runs: the entry points on 2 local processes x 4 CPU devices (one global mesh,
gloo collectives, started by `coop_jax.launch.local`) against 1 process x 8 devices.

The global batch of every step is the same whatever the number of hosts (each host holds its
block of it), so the logged metrics agree up to the float rounding of cross-process reductions.
"""
from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO
from coop_jax.jsonl import read_jsonl
from coop_jax.launch.local import launch

TINY = str(REPO / "configs" / "tiny_test.py")
VOLATILE = ("time/", "tokens_per_second")
# The surrogate of zero-mean advantages at ratio ~1 is a cancellation (|pg_loss| ~ 5e-5 on the
# first Cooper steps): its value follows the last bits of the log-probabilities, which differ
# between 1 x 8 and 2 x 4 devices (measured: -6.7e-5 vs -4.4e-5), so only an absolute bound.
NEAR_ZERO = {"pg_loss": 1e-4}


def _env(tmp_path) -> dict:
    # one persistent compilation cache (the suite's, tests/conftest.py, when it has one): later
    # runs of the same program, here or in another test, skip its compile
    cache = os.environ.get("JAX_COMPILATION_CACHE_DIR") or str(tmp_path / "jax_cache")
    return dict(os.environ, JAX_COMPILATION_CACHE_DIR=cache,
                JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")


def _train_command(workdir, steps: int, *overrides: str) -> list[str]:
    return [sys.executable, "-m", "coop_jax.trainer.cli", f"--config={TINY}",
            f"--workdir={workdir}",
            f"--config.train.steps={steps}", "--config.train.checkpoint_every=2", *overrides]


def _one_process(command: list[str], env: dict) -> None:
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def _two_processes(command: list[str], env: dict, capfd) -> None:
    rc = launch(command, num_processes=2, devices_per_process=4, env=env, timeout_s=600)
    assert rc == 0, capfd.readouterr().err[-3000:]


def _rows(workdir) -> list[dict]:
    return read_jsonl(os.path.join(workdir, "metrics.jsonl"))


def _assert_same_value(key: str, step, va, vb, rel: float) -> None:
    # An undefined metric (an on-policy AUC of a one-class batch, ...) is logged as None; which
    # one is None depends on what the CPU sampled, so None equals None and nothing else.
    if va is None or vb is None:
        assert va is None and vb is None, (
            f"step {step}: {key} is {va!r} in one run, {vb!r} in the other")
        return
    assert va == pytest.approx(vb, rel=rel, abs=NEAR_ZERO.get(key, 1e-6)), (step, key, va, vb)


def _assert_same_metrics(a: list[dict], b: list[dict], rel: float = 1e-3) -> None:
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for ra, rb in zip(a, b):
        ka = {k: v for k, v in ra.items() if not k.startswith(VOLATILE)}
        kb = {k: v for k, v in rb.items() if not k.startswith(VOLATILE)}
        assert ka.keys() == kb.keys(), (ra["step"], set(ka) ^ set(kb))
        for k in ka:
            _assert_same_value(k, ra["step"], ka[k], kb[k], rel)


def test_metric_comparison_takes_none_as_equal_and_names_a_none_against_a_number():
    _assert_same_metrics([{"step": 1, "rm/auc": None, "loss": 0.5}],
                         [{"step": 1, "rm/auc": None, "loss": 0.5 + 1e-5}])
    with pytest.raises(AssertionError, match="step 1: rm/auc is None in one run, 0.75 in"):
        _assert_same_metrics([{"step": 1, "rm/auc": None}], [{"step": 1, "rm/auc": 0.75}])
    with pytest.raises(AssertionError, match="loss"):
        _assert_same_metrics([{"step": 1, "loss": 0.5}], [{"step": 1, "loss": 0.6}])


def _children_of(workdir) -> list[int]:
    """PIDs of the processes whose command line names `workdir` (the launcher's children)."""
    pids = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (f"--workdir={workdir}".encode() in cmdline and b"coop_jax.trainer.cli" in cmdline
                and b"coop_jax.launch.local" not in cmdline):
            pids.append(int(entry.name))
    return pids


def test_cooper_on_two_processes_logs_the_metrics_of_one_and_resumes_after_kill9(tmp_path,
                                                                                  capfd):
    """Cooper with rollout.overlap: 2 x 4 devices log the metrics of 1 x 8. The step-2
    checkpoint holds the pending rollouts of step 2, global arrays written by both processes;
    after kill -9 of both during step 4, the resumed run logs step 3 again as the killed run
    logged it, and goes on as the 1-process run. The pairs take every option whose rows depend
    on the host's place: negatives chosen on device by the RM's scores (rollout_hardest, 2 per
    group), the reference solution as the positive of all-wrong groups (tokenised by each host
    for its prompts), and sham label swaps drawn per pair over all hosts.

    The same runs carry the host-dependent paths of the policy side (one set of runs for both,
    to keep the suite short): an SFT warm start, each host tokenising its block of its batches;
    a LoRA policy (adapters sharded like their base kernels, the base the KL anchor); rollouts
    from the continuous engine with fewer slots than rows; the rule verifier's labels (the
    logged rule accuracy) and the strict rule's (the pairs' labels, the gold of the RM
    diagnostics); the format probes' RM scores. An entropy bonus gives the untrained policy
    (never right) a gradient."""
    env = _env(tmp_path)
    overrides = ("--config.reward.type=cooper", "--config.rollout.overlap=True",
                 "--config.rl.entropy_coef=0.05", "--config.cooper.negative=rollout_hardest",
                 "--config.rollout.group_size=4", "--config.cooper.pairs_per_group=2",
                 "--config.cooper.reference_positive=True",
                 "--config.cooper.pair_label_noise=0.5",
                 "--config.sft.steps=4", "--config.sft.batch_size=4", "--config.sft.max_len=24",
                 "--config.model.lora.rank=4", "--config.rollout.engine=continuous",
                 "--config.rollout.slots=3", "--config.cooper.pair_labels=strict_numeric",
                 "--config.verifier.gold=strict_numeric", "--config.probes.format_questions=2",
                 "--config.evals.probes.every=2")
    one, killed = tmp_path / "one", tmp_path / "killed"
    _one_process(_train_command(one, 4, *overrides), env)
    launcher = subprocess.Popen(
        [sys.executable, "-m", "coop_jax.launch.local", "--num_processes=2",
         "--devices_per_process=4", "--", *_train_command(killed, 4, *overrides)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, before_kill = time.time() + 600, None
    while time.time() < deadline:  # kill -9 both once step 3 ran (after the step-2 checkpoint)
        if (killed / "metrics.jsonl").exists():
            rows = _rows(killed)
            if any(r["step"] == 3 for r in rows):
                before_kill = [r for r in rows if r["step"] <= 3]
                children = _children_of(killed)
                assert len(children) == 2, children
                for pid in children:
                    os.kill(pid, signal.SIGKILL)
                break
        if launcher.poll() is not None:
            pytest.fail("training finished before it could be killed")
        time.sleep(0.05)
    assert before_kill is not None, "step 3 was not logged in time"
    assert launcher.wait(timeout=120) != 0
    assert not (killed / "summary.json").exists()
    assert "pairs/valid" in before_kill[-1] and "rm_loss" in before_kill[-1]
    # every step forms pairs, with hard negatives ranked on device against reference positives
    assert all(r["pairs/valid"] > 0 and r["pairs/reference_positive"] > 0
               for r in _rows(one)[1:])
    _assert_same_metrics(_rows(one)[:4], before_kill)
    _two_processes(_train_command(killed, 4, *overrides), env, capfd)
    from coop_jax import checkpoint
    ckpt = checkpoint.Checkpointer(str(killed / "checkpoints"))
    assert ckpt.read_meta(2)["pending_rollouts"] is True
    ckpt.close()
    resumed = _rows(killed)
    _assert_same_metrics(before_kill, resumed[:4], rel=1e-5)
    _assert_same_metrics(_rows(one), resumed)
    # one process writes the run's files; both took part in the checkpoints
    assert json.loads((killed / "summary.json").read_text())["steps"] == 4
    assert sorted(p.name for p in (killed / "checkpoints").iterdir() if p.name.isdigit()) == [
        "0", "2", "4"]
    import jax

    from coop_jax.models import lora
    ckpt = checkpoint.Checkpointer(str(killed / "checkpoints"))
    adapters = ckpt.load_item("policy_params", 4)
    ckpt.close()
    assert {p[-1].key for p, _ in jax.tree_util.tree_leaves_with_path(adapters)} <= set(
        lora.ADAPTERS)


def test_coop_eval_on_two_processes_gives_the_numbers_of_one(tmp_path, capfd):
    """Each host generates and decodes its block of every evaluation batch; the report and the
    sample rows are combined over hosts (and written by process 0)."""
    from conftest import repo_config, save_tiny_policy

    save_tiny_policy(tmp_path / "work", 2, repo_config("tiny_test"))
    env = _env(tmp_path)

    def command(out):
        return [sys.executable, "-m", "coop_jax.eval.cli", f"--checkpoint={tmp_path / 'work'}",
                f"--config={TINY}", "--num_examples=6", "--k=2", "--batch_size=4",
                "--max_new_tokens=8", f"--out={out}"]

    _one_process(command(tmp_path / "one"), env)
    _two_processes(command(tmp_path / "two"), env, capfd)
    one = json.loads((tmp_path / "one" / "report.json").read_text())
    two = json.loads((tmp_path / "two" / "report.json").read_text())
    for key in ("greedy_accuracy", "avg_at_k", "pass_at_k", "mean_response_length"):
        assert two[key] == pytest.approx(one[key], rel=1e-6), key
    assert two["num_problems"] == one["num_problems"] == 6
    assert two["num_completions"] == one["num_completions"] == 6 * 3
    rows = lambda run: read_jsonl(tmp_path / run / "samples.jsonl")
    assert [r["completion"] for r in rows("two")] == [r["completion"] for r in rows("one")]


def test_coop_train_rm_on_two_processes_matches_one(tmp_path, capfd):
    """Each host tokenises its block of every RM batch; the loss, the held-out accuracy and the
    exported scores are those of one process."""
    from coop_jax.rm.input import write_triples

    triples = [{"question": f"{a}+{b}", "reference": str(a + b),
                "completion": f"{a}+{b} = {a + b + (10 if bad else 0)}. #### "
                              f"{a + b + (10 if bad else 0)}", "label": not bad}
               for a in range(4) for b in range(4) for bad in (False, True)]
    write_triples(str(tmp_path / "train.jsonl"), triples[:24])
    write_triples(str(tmp_path / "held.jsonl"), triples[24:])
    env = _env(tmp_path)

    def command(run):
        r = "--config.rm_train."
        return [sys.executable, "-m", "coop_jax.rm.train", f"--config={TINY}",
                r + "mode=train", r + f"triples={tmp_path / 'train.jsonl'}",
                r + f"heldout={tmp_path / 'held.jsonl'}", r + f"workdir={tmp_path / run}",
                r + "epochs=2", r + "batch_size=8", r + "log_every=1", r + "max_len=64",
                r + "learning_rate=3e-3", r + f"export_hf={tmp_path / run / 'hf'}"]

    _one_process(command("one"), env)
    _two_processes(command("two"), env, capfd)
    _assert_same_metrics(read_jsonl(tmp_path / "one" / "rm_metrics.jsonl"),
                         read_jsonl(tmp_path / "two" / "rm_metrics.jsonl"))
    one, two = (json.loads((tmp_path / run / "rm_summary.json").read_text())
                for run in ("one", "two"))
    assert two["steps"] == one["steps"] == 6
    assert two["heldout_accuracy"] == pytest.approx(one["heldout_accuracy"])
    assert (tmp_path / "two" / "hf" / "config.json").exists()
    # coop-eval of the RM checkpoint on the held-out triples: each host scores its block
    evaluate = lambda out: [
        sys.executable, "-m", "coop_jax.eval.cli", f"--config={TINY}",
        f"--checkpoint={tmp_path / 'two'}", f"--rm_triples={tmp_path / 'held.jsonl'}",
        "--max_len=64", "--batch_size=4", f"--out={tmp_path / out}"]
    _one_process(evaluate("eval_one"), env)
    _two_processes(evaluate("eval_two"), env, capfd)
    scores = lambda out: [r["score"] for r in read_jsonl(tmp_path / out / "samples.jsonl")]
    assert scores("eval_two") == pytest.approx(scores("eval_one"), rel=1e-5, abs=1e-6)
    assert len(scores("eval_two")) == 8


HOST_SCRIPT = '''
import numpy as np, jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from coop_jax import parallel
from coop_jax.parallel import host

if __name__ == "__main__":
    parallel.maybe_initialize_distributed(True)
    me, devices = jax.process_index(), np.asarray(jax.devices())
    local = np.arange(12).reshape(4, 3) + 100 * me
    interleaved = Mesh(devices[[0, 2, 1, 3]].reshape(4, 1, 1), ("data", "fsdp", "tensor"))
    for mesh in (parallel.make_mesh((2, 1, 2)), interleaved):
        for sharding in (host.row_sharding(mesh, (8, 3)), NamedSharding(mesh, P())):
            g = host.global_rows(local, sharding)
            assert g.shape == (8, 3) and g.sharding == sharding
            np.testing.assert_array_equal(host.fetch(g)[:4], np.arange(12).reshape(4, 3))
            np.testing.assert_array_equal(host.fetch(g)[4:], np.arange(12).reshape(4, 3) + 100)
            np.testing.assert_array_equal(host.local_rows(host.host_aligned(g * 2)), local * 2)
        # the same host value on every process (loaded weights) placed on the global mesh
        same = np.arange(16.0).reshape(8, 2)
        placed = jax.device_put(same, host.row_sharding(mesh, same.shape))
        np.testing.assert_array_equal(host.fetch(placed), same)
    # two parts per host (Co-rewarding-I's views): part-major, as one process would hold them
    parts = host.global_rows(local, host.row_sharding(mesh, (8, 3)), parts=2)
    np.testing.assert_array_equal(host.fetch(parts)[:, 0], [0, 3, 100, 103, 6, 9, 106, 109])
    m = host.reduce_metrics({"acc": float(me), "pairs/valid": 3, "time/verify": 1.0 + me,
                             "none": None})
    assert m == {"acc": 0.5, "pairs/valid": 6.0, "time/verify": 2.0, "none": None}, m
    assert host.gather_json({"me": me, "text": "é" * (me + 1)}) == [
        {"me": 0, "text": "é"}, {"me": 1, "text": "éé"}]
    assert host.any_process(me == 1) and not host.any_process(False)
    # padding trimmed to the batch: each host's valid columns differ, every host cuts one window
    from coop_jax.trainer.batch import TrainBatch, trim_padding
    mask = np.zeros((2, 32), bool)
    mask[:, :3 + 10 * me] = True  # host 0: 3 valid columns, host 1: 13
    prompt_mask = np.zeros((2, 24), bool)
    prompt_mask[:, 20 - 9 * me:] = True  # left-padded: host 0 needs 4 columns, host 1 13
    batch = TrainBatch.from_flat(dict(prompt_tokens=prompt_mask.astype(np.int32),
                                      prompt_mask=prompt_mask, tokens=mask.astype(np.int32),
                                      mask=mask, rewards=np.zeros(2, np.float32)))
    cut, lengths = trim_padding(batch, 4)
    assert lengths == {"prompt": 16, "response": 16}, lengths
    assert cut.mask.sum() == mask.sum() and cut.prompt_mask.sum() == prompt_mask.sum()
    print("host helpers ok", me)
'''


def test_host_helpers_on_two_processes(tmp_path, capfd):
    """Rows to global arrays and back on a host-aligned mesh and on one whose data axis
    interleaves the processes' devices; metric reduction, JSON gathering, any_process."""
    script = tmp_path / "host_helpers.py"
    script.write_text(HOST_SCRIPT)
    rc = launch([sys.executable, str(script)], num_processes=2, devices_per_process=2,
                env=dict(os.environ, PYTHONPATH=str(REPO)), timeout_s=300)
    out = capfd.readouterr()
    assert rc == 0, out.err[-3000:]
    assert "[p0] host helpers ok 0" in out.out and "[p1] host helpers ok 1" in out.out
