"""Run N JAX processes on this machine as one multi-process job (like torchrun's standalone mode).

    python -m coop_jax.launch.local --num_processes=2 --devices_per_process=4 -- \\
        coop-train --config=configs/default.py --workdir=runs/mp

Each child sees `devices_per_process` simulated CPU devices, so the whole job has
num_processes x devices_per_process devices spread over processes: a laptop can exercise the
multi-host code paths (per-process data loading, cross-process collectives, checkpointing from
several processes) that a TPU pod or a SLURM job would run. The children get

    COOP_COORDINATOR_ADDRESS=127.0.0.1:<port>   (process 0 serves the coordinator)
    COOP_NUM_PROCESSES=<N>   COOP_PROCESS_ID=<i>
    XLA_FLAGS=... --xla_force_host_platform_device_count=<devices_per_process>
    JAX_PLATFORMS=cpu (with --platform=cpu, the default)
    JAX_CPU_COLLECTIVES_IMPLEMENTATION=gloo (unless already set): CPU collectives across processes

and `--config.mesh.distributed=True` is appended to a command that takes `--config` (the coop_jax
entry points), so `coop_jax.parallel.maybe_initialize_distributed` joins the job. A plain Python
script run this way joins it with

    coop_jax.parallel.maybe_initialize_distributed(True)      # reads the COOP_* variables
    # or, without coop_jax:
    jax.distributed.initialize(os.environ["COOP_COORDINATOR_ADDRESS"],
                               int(os.environ["COOP_NUM_PROCESSES"]),
                               int(os.environ["COOP_PROCESS_ID"]))

before its first JAX computation. Every output line of child i is forwarded with a "[p<i>] "
prefix (stdout to stdout, stderr to stderr). When a child fails, the others get SIGTERM (SIGKILL
after a grace period) and the launcher exits with the failed child's code; SIGINT / SIGTERM sent
to the launcher are forwarded to all children.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
DISTRIBUTED_FLAG = "--config.mesh.distributed"
PLATFORMS = ("cpu", "inherit")
GRACE_S = 5.0
TIMEOUT_RC = 124
_POLL_S = 0.05
_PROG = "coop_jax.launch.local"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (process 0's coordinator binds it moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def child_env(base: dict, process_id: int, num_processes: int, devices_per_process: int,
              coordinator_address: str, platform: str = "cpu") -> dict:
    """Child `process_id`'s environment: `base` plus the coordinator and device settings. An
    inherited device-count flag (e.g. the test suite's 8 devices) is replaced, not appended to,
    since XLA would read whichever comes last."""
    env = dict(base)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(DEVICE_COUNT_FLAG)]
    env["XLA_FLAGS"] = " ".join(flags + [f"{DEVICE_COUNT_FLAG}={devices_per_process}"])
    env.pop("JAX_NUM_CPU_DEVICES", None)  # it would override the flag
    if platform == "cpu":
        env["JAX_PLATFORMS"] = "cpu"
    env.update(COOP_COORDINATOR_ADDRESS=coordinator_address,
               COOP_NUM_PROCESSES=str(num_processes), COOP_PROCESS_ID=str(process_id))
    env.setdefault("JAX_CPU_COLLECTIVES_IMPLEMENTATION", "gloo")
    env.setdefault("PYTHONUNBUFFERED", "1")  # lines arrive as they are printed, not at exit
    return env


def with_distributed_flag(command: list[str]) -> list[str]:
    """`command` plus --config.mesh.distributed=True when it takes an ml_collections --config
    and does not set that field itself."""
    takes_config = any(a == "--config" or a.startswith("--config=") for a in command)
    if takes_config and not any(a.startswith(DISTRIBUTED_FLAG) for a in command):
        return [*command, f"{DISTRIBUTED_FLAG}=True"]
    return list(command)


def _forward(pipe, prefix: str, stream_name: str, lock: threading.Lock) -> None:
    for raw in iter(pipe.readline, b""):
        line = raw.decode("utf-8", errors="replace")
        stream = getattr(sys, stream_name)
        with lock:
            stream.write(prefix + (line if line.endswith("\n") else line + "\n"))
            stream.flush()
    pipe.close()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    """`sig` to the child's process group (its own helpers, e.g. verifier workers, too)."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _exit_code(code: int) -> int:
    return 128 - code if code < 0 else code  # killed by signal n -> 128 + n, as a shell reports


def _note(message: str) -> None:
    sys.stderr.write(f"{_PROG}: {message}\n")
    sys.stderr.flush()


def _check_args(command, num_processes, devices_per_process, port, platform, timeout_s,
                grace_s) -> None:
    if not command:
        raise ValueError("no command given: put it after '--', e.g. -- coop-train --config=...")
    if isinstance(num_processes, bool) or not isinstance(num_processes, int) or num_processes < 1:
        raise ValueError(f"--num_processes must be an integer >= 1, got {num_processes!r}")
    if (isinstance(devices_per_process, bool) or not isinstance(devices_per_process, int)
            or devices_per_process < 1):
        raise ValueError(f"--devices_per_process must be an integer >= 1, got "
                         f"{devices_per_process!r}")
    if port is not None and not (isinstance(port, int) and 0 < port < 65536):
        raise ValueError(f"--port must be in 1..65535, got {port!r}")
    if platform not in PLATFORMS:
        raise ValueError(f"--platform must be one of {list(PLATFORMS)}, got {platform!r}")
    if timeout_s is not None and not timeout_s > 0:
        raise ValueError(f"--timeout_s must be > 0, got {timeout_s!r}")
    if not grace_s >= 0:
        raise ValueError(f"--grace_s must be >= 0, got {grace_s!r}")
    if os.sep not in command[0] and shutil.which(command[0]) is None:
        raise FileNotFoundError(f"command {command[0]!r} not found on PATH")


def launch(command: list[str], num_processes: int, devices_per_process: int,
           port: int | None = None, env: dict | None = None, timeout_s: float | None = None,
           platform: str = "cpu", grace_s: float = GRACE_S) -> int:
    """Run `command` as `num_processes` processes of one JAX job on this machine; return 0 when
    all succeed, else the first failing child's exit code (128 + n for a child killed by signal
    n, TIMEOUT_RC when `timeout_s` ran out, 128 + n when the launcher got signal n).

    `env` adds variables for every child on top of this process's environment; `port` is the
    coordinator's (a free one by default); `grace_s` is how long stopped children get between
    SIGTERM and SIGKILL."""
    _check_args(command, num_processes, devices_per_process, port, platform, timeout_s, grace_s)
    address = f"127.0.0.1:{port or free_port()}"
    base = {**os.environ, **(env or {})}
    command = with_distributed_flag(command)
    _note(f"{num_processes} process(es) x {devices_per_process} device(s), coordinator {address}")

    lock, procs, readers = threading.Lock(), [], []
    received: list[int] = []
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda signum, _frame: received.append(signum))
    try:
        for i in range(num_processes):
            proc = subprocess.Popen(
                command, env=child_env(base, i, num_processes, devices_per_process, address,
                                       platform),
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True)  # a terminal's Ctrl-C reaches them through us only
            procs.append(proc)
            for pipe, name in ((proc.stdout, "stdout"), (proc.stderr, "stderr")):
                reader = threading.Thread(target=_forward, args=(pipe, f"[p{i}] ", name, lock),
                                          daemon=True)
                reader.start()
                readers.append(reader)
        return _supervise(procs, received, timeout_s, grace_s)
    finally:
        for proc in procs:
            if proc.poll() is None:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
        for reader in readers:
            reader.join(timeout=grace_s)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _supervise(procs: list[subprocess.Popen], received: list[int], timeout_s: float | None,
               grace_s: float) -> int:
    """Wait for every child; on the first failure, a timeout or a signal, stop the rest."""
    start, result, kill_at, forwarded = time.monotonic(), None, None, 0

    def stop(sig: int) -> None:
        nonlocal kill_at
        for proc in procs:
            if proc.poll() is None:
                _signal_group(proc, sig)
        if kill_at is None:
            kill_at = time.monotonic() + grace_s

    while True:
        codes = [proc.poll() for proc in procs]
        if result is None:
            failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                i, code = failed[0]
                result = _exit_code(code)
                if any(c is None for c in codes):
                    _note(f"process {i} exited with code {result}; stopping the others")
                stop(signal.SIGTERM)
            elif timeout_s is not None and time.monotonic() - start > timeout_s:
                result = TIMEOUT_RC
                _note(f"timeout after {timeout_s:g} s; stopping all processes")
                stop(signal.SIGTERM)
        if all(c is not None for c in codes):
            return result or 0
        if len(received) > forwarded:
            sig, forwarded = received[-1], len(received)
            if result is None:
                result = 128 + sig
            if forwarded > 1:  # a second Ctrl-C: no more grace
                stop(signal.SIGKILL)
            else:
                _note(f"got {signal.Signals(sig).name}; forwarding it to the processes")
                stop(sig)
        if kill_at is not None and time.monotonic() >= kill_at:
            stop(signal.SIGKILL)
        time.sleep(_POLL_S)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not argparse's usage block
        self.exit(2, f"{_PROG}: error: {message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=f"python -m {_PROG}",
        usage=f"python -m {_PROG} [options] -- COMMAND [ARGS...]",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Start COMMAND as N processes of one multi-process JAX job on this machine "
                    "(simulated CPU devices per process, a local coordinator), forward their "
                    "output with [p<i>] prefixes and stop them all when one fails.",
        epilog="example:\n"
               f"  python -m {_PROG} --num_processes=2 --devices_per_process=4 -- \\\n"
               "      coop-train --config=configs/default.py --workdir=runs/mp\n\n"
               "Children get COOP_COORDINATOR_ADDRESS, COOP_NUM_PROCESSES and COOP_PROCESS_ID;\n"
               f"a command with --config also gets {DISTRIBUTED_FLAG}=True.")
    parser.add_argument("--num_processes", type=int, default=2,
                        help="processes to start (default: 2)")
    parser.add_argument("--devices_per_process", type=int, default=1,
                        help="simulated CPU devices of each process (default: 1)")
    parser.add_argument("--port", type=int, default=None,
                        help="coordinator port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--platform", default="cpu", choices=PLATFORMS,
                        help="cpu: JAX_PLATFORMS=cpu in the children (default); inherit: keep "
                             "this environment's JAX_PLATFORMS")
    parser.add_argument("--timeout_s", type=float, default=None,
                        help=f"stop everything after this many seconds (exit {TIMEOUT_RC})")
    parser.add_argument("--grace_s", type=float, default=GRACE_S,
                        help=f"seconds between SIGTERM and SIGKILL when stopping (default: "
                             f"{GRACE_S:g})")
    return parser


def main(argv: list[str] | None = None) -> int:
    """The command line: launcher options, then `--`, then the command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    command = argv[split + 1:]
    if "--" not in argv:
        parser.error("no command given: put it after '--', e.g. -- coop-train --config=...")
    try:
        return launch(command, args.num_processes, args.devices_per_process, port=args.port,
                      timeout_s=args.timeout_s, platform=args.platform, grace_s=args.grace_s)
    except (ValueError, FileNotFoundError) as e:
        parser.error(str(e))


if __name__ == "__main__":
    sys.exit(main())
