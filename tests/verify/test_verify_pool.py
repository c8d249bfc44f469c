"""RuleVerifier process pool: ordering, hard timeouts, crashes, memory cap, threads, CLI."""

import json
import subprocess
import sys
import threading
import time

import pytest

from coop_jax.verify import RuleVerifier, verify_detailed

TIMEOUT_S = 3.0

ITEMS = [
    ("18", "so \\boxed{18}"), ("18", "#### 19"), ("\\frac{14}{3}", "The answer is $4\\frac23$."),
    ("(3,4]", "\\boxed{(3,4)}"), ("\\pm 2021", "\\boxed{2021}"), ("x=5", "Final Answer: 5"),
    ("\\text{(C)}", "\\boxed{C}"), ("1,-2", "\\boxed{-2,1}"), ("\\sec^2 y", "\\boxed{\\tan^2 y+1}"),
    ("52_8", "\\boxed{42}"), ("7", "no answer given in this long sentence here"),
] * 3


@pytest.fixture(scope="module")
def verifier():
    with RuleVerifier(num_workers=2, timeout_s=TIMEOUT_S, memory_limit_mb=512, chunk_size=4) as v:
        v.wait_ready()
        yield v


def test_batch_matches_in_process_and_keeps_order(verifier):
    refs, comps = zip(*ITEMS)
    got = verifier.verify_batch_detailed(list(refs), list(comps))
    want = [verify_detailed(r, c) for r, c in ITEMS]
    assert [g.correct for g in got] == [w.correct for w in want]
    assert [g.extracted for g in got] == [w.extracted for w in want]
    assert verifier.verify_batch(list(refs), list(comps)) == [w.correct for w in want]
    assert verifier.extract_batch(["\\boxed{1}", "nothing here at all really", "#### 3"]) == ["1", None, "3"]
    assert verifier.equivalent_batch(["0.5", "2"], ["\\frac12", "3"]) == [True, False]
    assert verifier.verify_batch([], []) == []


def test_hung_item_is_killed_and_pool_recovers(verifier):
    before = verifier.stats
    t0 = time.monotonic()
    out = verifier._run("_sleep", [(0.0,), (60.0,), (0.0,), (0.0,)])
    assert time.monotonic() - t0 < TIMEOUT_S + 30
    assert out == [True, False, True, True]
    after = verifier.stats
    assert after.timeouts == before.timeouts + 1
    assert after.worker_restarts == before.worker_restarts + 1
    assert verifier.verify_batch(["1"], ["\\boxed{1}"]) == [True]


def test_timed_out_verify_item_is_reported(verifier, monkeypatch):
    slow = "\\boxed{" + "1" * (1 << 21) + "}"  # tens of ms of work: far over a 1 ms limit
    monkeypatch.setattr(verifier, "timeout_s", 0.001)
    before = verifier.stats.timeouts
    r = verifier.verify_batch_detailed(["1"], [slow])
    assert r[0].timed_out and not r[0].correct and r[0].extracted is None
    assert verifier.stats.timeouts == before + 1
    monkeypatch.setattr(verifier, "timeout_s", TIMEOUT_S)
    r = verifier.verify_batch_detailed(["2"], ["\\boxed{2}"])
    assert r[0].correct and not r[0].timed_out


def test_crashed_worker_is_replaced(verifier):
    before = verifier.stats
    assert verifier._run("_die", [()]) == [False]
    assert verifier.stats.crashes == before.crashes + 1
    assert verifier.verify_batch(["3", "4"], ["\\boxed{3}", "\\boxed{5}"]) == [True, False]


def test_memory_limit_applies_in_worker(verifier):
    assert verifier._run("_alloc", [(16,), (4096,), (16,)]) == [True, False, True]


def test_pathological_inputs_finish_and_pool_stays_healthy(verifier):
    nasty = [
        "\\boxed{9^{9^{9^9}}}", "\\boxed{10^{10^{10}}!}", "\\boxed{(10^{100})!}",
        "\\boxed{x^{x^{x^{x^{x}}}}}", "\\boxed{e^{e^{e^{e^{10}}}}}", "x" * (1 << 20),
        "\\boxed{" + "1" * (1 << 20) + "}", "{" * 10000 + "1" + "}" * 10000,
        "\\boxed{" * 10000, "\\boxed{" * 5000 + "1" + "}" * 5000, "\\frac{" * 3000,
        "#### " + "1," * 200000, "\\boxed{\\binom{10^{100}}{10^{50}}}", "\\boxed{\\Gamma(10^{9})}",
        "\\boxed{\\sum_{n=1}^{10^{10}} n!}", "\\boxed{" + "\\boxed{1}\\quad" * 5000 + "}",
        "\\boxed{" + "1:" * 5000 + "1}",
    ]
    t0 = time.monotonic()
    res = verifier.verify_batch_detailed(["1"] * len(nasty), nasty)
    assert time.monotonic() - t0 < len(nasty) * TIMEOUT_S
    assert not any(r.correct for r in res)
    assert verifier.verify_batch(["\\frac12"], ["\\boxed{0.5}"]) == [True]


def test_usable_from_a_thread(verifier):
    box = {}
    th = threading.Thread(target=lambda: box.setdefault("r", verifier.verify_batch(["5"], ["\\boxed{5}"])))
    th.start()
    th.join(60)
    assert box["r"] == [True]


def test_bad_batch_arguments_name_the_field(verifier):
    with pytest.raises(ValueError, match="references has 2 items"):
        verifier.verify_batch(["1", "2"], ["1"])
    with pytest.raises(TypeError, match=r"completions\[1\] is int"):
        verifier.verify_batch(["1", "2"], ["1", 2])


def test_spawn_start_method_and_close():
    v = RuleVerifier(num_workers=1, timeout_s=30, start_method="spawn")
    procs = [w.proc for w in v._workers]
    assert v.verify_batch(["0.25"], ["\\boxed{25\\%}"]) == [True]
    v.close()
    v.close()
    assert not any(p.is_alive() for p in procs)
    with pytest.raises(RuntimeError, match="closed"):
        v.verify_batch(["1"], ["1"])
    with pytest.raises(ValueError, match="start_method"):
        RuleVerifier(start_method="fork")


def test_cli_labels_file_and_reports_bad_lines(tmp_path):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    rows = [{"reference": "18", "completion": "#### 18", "id": 0},
            {"reference": 3, "completion": "The answer is 4.", "id": 1}]
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cmd = [sys.executable, "-m", "coop_jax.verify", "--in", str(inp), "--out", str(out),
           "--workers", "1", "--timeout", "10"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(g["id"], g["correct"], g["extracted"]) for g in got] == [(0, True, "18"), (1, False, "4")]
    assert "verified 2 items: 1 correct" in proc.stderr and "labels/s" in proc.stderr

    inp.write_text(json.dumps(rows[0]) + "\n" + json.dumps({"reference": "1"}) + "\n")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "line 2: missing field 'completion'" in proc.stderr
    proc = subprocess.run(cmd + ["--skip-invalid"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "1 skipped lines" in proc.stderr
    assert len(out.read_text().splitlines()) == 1


_UNGUARDED_SCRIPT = """\
import sys
from coop_jax.verify import RuleVerifier

verifier = RuleVerifier(num_workers=1, timeout_s=10, start_method=sys.argv[1])
print("RESULT", verifier.verify_batch(["1"], ["\\\\boxed{1}"]))
"""


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_module_level_verifier_without_main_guard_names_the_fix(tmp_path, start_method):
    script = tmp_path / "unguarded.py"
    script.write_text(_UNGUARDED_SCRIPT)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(script), start_method], capture_output=True,
                          text=True, timeout=180, cwd=tmp_path)
    assert proc.returncode != 0 and "RESULT" not in proc.stdout
    assert time.monotonic() - t0 < 120  # fails fast: no round of doomed restarts
    error = proc.stderr[proc.stderr.rindex("RuntimeError: verifier worker"):]
    assert 'if __name__ == "__main__":' in error and "module level" in error
    # the first worker's traceback is forwarded, down to the script line that made the verifier
    assert "traceback of the first worker that failed" in error
    assert f'File "{script}", line 4, in <module>' in error
    assert "verifier = RuleVerifier(" in error


def test_bad_memory_limit_names_the_field():
    with pytest.raises(ValueError, match="memory_limit_mb must be >= 1"):
        RuleVerifier(memory_limit_mb=0)


def test_worker_warm_up_failure_is_forwarded(monkeypatch):
    """A worker whose warm-up raises sends its traceback; after the last retry the parent's
    error carries it (driven through ``_receive`` with stand-in workers, no processes)."""
    tb = "Traceback (most recent call last):\n  ...\nImportError: no sympy"

    class Conn:
        def recv(self):
            return ("failed", tb)

    class Worker:
        proc = type("Proc", (), {"pid": None})()
        born_wall, ready, conn = 0.0, False, Conn()

    v = RuleVerifier.__new__(RuleVerifier)  # bookkeeping only: no worker processes
    v.num_workers, v._failed_starts, v._first_failure, v._closed = 1, 0, None, True
    v._workers = [Worker()]
    monkeypatch.setattr(v, "_replace", lambda k: None, raising=False)
    for _ in range(2):
        assert v._receive(0, "verify", [], None) == 0
    with pytest.raises(RuntimeError) as exc:
        v._receive(0, "verify", [], None)
    msg = str(exc.value)
    assert "failed during start-up; giving up after 3 failed starts" in msg
    assert "ImportError: no sympy" in msg and 'if __name__ == "__main__":' in msg
