"""coop_jax.launch.local: real 2-process JAX jobs on CPU, failure handling, output prefixes,
signal forwarding, the children's environment and the command line."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from coop_jax.launch import local

ALLGATHER = """
    import jax
    import ml_collections
    import numpy as np
    from jax.experimental import multihost_utils

    from coop_jax import parallel

    parallel.maybe_initialize_distributed(ml_collections.ConfigDict(dict(
        distributed=True, coordinator_address="", num_processes=0, process_id=-1,
        shape=(-1, 1, 1))))
    gathered = multihost_utils.process_allgather(np.array([jax.process_index()]))
    # one write: print's separate writes of its arguments let gloo's own log land between them
    print(f"gathered {gathered.ravel().tolist()} processes {jax.process_count()} devices "
          f"{jax.device_count()} local {jax.local_device_count()}", flush=True)
"""


def _script(tmp_path, body: str) -> str:
    path = tmp_path / "child.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


def _launcher(*args):
    return [sys.executable, "-m", "coop_jax.launch.local", *args]


def test_two_processes_join_one_job(tmp_path):
    """The conftest's 8-device XLA_FLAGS is inherited; each child must see 2 devices."""
    assert "device_count=8" in os.environ["XLA_FLAGS"]
    out = subprocess.run(_launcher("--num_processes=2", "--devices_per_process=2", "--",
                                   sys.executable, _script(tmp_path, ALLGATHER)),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    # gloo's C++ log shares the children's stdout; on a loaded machine its line and the
    # script's can meet in one line, so look for the script's output within p<i>'s lines
    for i in range(2):
        assert any(line.startswith(f"[p{i}] ") and
                   "gathered [0, 1] processes 2 devices 4 local 2" in line
                   for line in out.stdout.splitlines()), out.stdout
    assert "2 process(es) x 2 device(s), coordinator 127.0.0.1:" in out.stderr


def test_a_failing_process_stops_the_others(tmp_path, capsys):
    script = _script(tmp_path, """
        import os, sys, time
        if os.environ["COOP_PROCESS_ID"] == "0":
            sys.exit(3)
        time.sleep(60)
    """)
    start = time.monotonic()
    assert local.launch([sys.executable, script], num_processes=2, devices_per_process=1,
                        grace_s=2) == 3
    assert time.monotonic() - start < 15
    assert "process 0 exited with code 3; stopping the others" in capsys.readouterr().err


def test_a_process_ignoring_sigterm_is_killed(tmp_path, capsys):
    script = _script(tmp_path, """
        import os, signal, sys, time
        if os.environ["COOP_PROCESS_ID"] == "0":
            time.sleep(0.5)
            sys.exit(5)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(60)
    """)
    start = time.monotonic()
    assert local.launch([sys.executable, script], 2, 1, grace_s=0.5) == 5
    assert time.monotonic() - start < 15


def test_output_is_prefixed_per_process_and_stream(tmp_path, capsys):
    script = _script(tmp_path, """
        import os, sys
        i = os.environ["COOP_PROCESS_ID"]
        print(f"out {i} a")
        print(f"out {i} b")
        print(f"err {i}", file=sys.stderr)
        sys.stdout.write(f"tail {i}")  # no final newline
    """)
    assert local.launch([sys.executable, script], 2, 1) == 0
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    for i in range(2):
        assert [line for line in out if line.startswith(f"[p{i}] ")] == [
            f"[p{i}] out {i} a", f"[p{i}] out {i} b", f"[p{i}] tail {i}"]
        assert f"[p{i}] err {i}" in captured.err.splitlines()


def test_sigterm_is_forwarded(tmp_path):
    script = _script(tmp_path, """
        import os, signal, sys, time
        def stop(signum, frame):
            print("child got", signal.Signals(signum).name, flush=True)
            sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
        print("ready", flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen(_launcher("--num_processes=2", "--", sys.executable, script),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = [proc.stdout.readline() for _ in range(2)]
        assert sorted(ready) == ["[p0] ready\n", "[p1] ready\n"]
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    assert sorted(out.splitlines()) == ["[p0] child got SIGTERM", "[p1] child got SIGTERM"]
    assert "got SIGTERM; forwarding it" in err


def test_timeout(tmp_path, capsys):
    script = _script(tmp_path, "import time; time.sleep(60)\n")
    rc = local.launch([sys.executable, script], 1, 1, timeout_s=0.5, grace_s=1)
    assert rc == local.TIMEOUT_RC and "timeout after 0.5 s" in capsys.readouterr().err


def test_child_env():
    base = {"XLA_FLAGS": "--xla_foo=1 --xla_force_host_platform_device_count=8",
            "JAX_NUM_CPU_DEVICES": "8", "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "mpi", "KEEP": "x"}
    env = local.child_env(base, 1, 3, 4, "127.0.0.1:1234")
    assert env["XLA_FLAGS"] == "--xla_foo=1 --xla_force_host_platform_device_count=4"
    assert "JAX_NUM_CPU_DEVICES" not in env and env["JAX_PLATFORMS"] == "cpu"
    assert (env["COOP_COORDINATOR_ADDRESS"], env["COOP_NUM_PROCESSES"], env["COOP_PROCESS_ID"]) == (
        "127.0.0.1:1234", "3", "1")
    assert env["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] == "mpi" and env["KEEP"] == "x"
    fresh = local.child_env({"JAX_PLATFORMS": "tpu"}, 0, 1, 2, "h:1", platform="inherit")
    assert fresh["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2"
    assert fresh["JAX_PLATFORMS"] == "tpu" and fresh["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] == "gloo"


def test_the_distributed_flag_is_added_to_config_commands():
    assert local.with_distributed_flag(["coop-train", "--config=c.py", "--workdir=w"]) == [
        "coop-train", "--config=c.py", "--workdir=w", "--config.mesh.distributed=True"]
    assert local.with_distributed_flag(["coop-eval", "--config", "c.py"])[-1] == (
        "--config.mesh.distributed=True")
    kept = ["coop-train", "--config=c.py", "--config.mesh.distributed=False"]
    assert local.with_distributed_flag(kept) == kept
    assert local.with_distributed_flag(["python", "script.py"]) == ["python", "script.py"]


def test_the_launcher_does_not_import_jax():
    code = "import sys, coop_jax.launch.local; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_help():
    out = subprocess.run(_launcher("--help"), capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    assert "--num_processes" in out.stdout and "example:" in out.stdout


@pytest.mark.parametrize("args, match", [
    (["--num_processes=0", "--", "python"], "--num_processes must be an integer >= 1"),
    (["--devices_per_process=0", "--", "python"], "--devices_per_process must be"),
    (["--port=70000", "--", "python"], "--port must be in 1..65535"),
    (["--num_processes=2"], "no command given"),
    (["--", "no-such-command-xyz"], "'no-such-command-xyz' not found"),
    (["--bogus", "--", "python"], "unrecognized arguments: --bogus"),
    (["--platform=gpu", "--", "python"], "--platform"),
])
def test_bad_arguments(args, match):
    out = subprocess.run(_launcher(*args), capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.splitlines()) == 1 and match in out.stderr, out.stderr
