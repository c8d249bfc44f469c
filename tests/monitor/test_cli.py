"""`coop-monitor`: replay over a made-up run folder (plain and `.xz`) and a metrics file, the
`--config.monitor.*` overrides, `--help`, one-line errors, and the probes command."""
import json
import lzma
import os
import subprocess
import sys

import pytest
from absl.app import UsageError
from conftest import REPO

from coop_jax.jsonl import read_jsonl
from coop_jax.monitor import cli


def write_run(folder, compress=False, break_at=30):
    """A static-RM run whose gap jumps to 0.3 from step `break_at`: the alarm is at break_at+1."""
    os.makedirs(folder, exist_ok=True)
    rows = [{"step": 0, "eval/greedy_accuracy_strict": 0.3}]
    rows += [{"step": t, "proxy_reward_mean": 0.4 + (0.3 if t >= break_at else 0.0),
              "rule_accuracy": 0.4, "rm_rule_agreement": 1.0, "response_length": 20.0}
             for t in range(1, 60)]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    path = os.path.join(folder, "metrics.jsonl")
    if compress:
        with lzma.open(path + ".xz", "wt") as fh:
            fh.write(text)
    else:
        with open(path, "w") as fh:
            fh.write(text)
    return str(folder)


def replay_lines(argv, capsys):
    cli.main(["coop-monitor", "replay", *argv])
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_replay_a_run_folder_plain_and_xz(tmp_path, capsys):
    plain = write_run(tmp_path / "plain")
    packed = write_run(tmp_path / "packed", compress=True)
    lines = replay_lines([plain, packed, os.path.join(plain, "metrics.jsonl")], capsys)
    assert [(l["path"], l["alarm_step"], l["signal"]) for l in lines] == [
        (plain, 31, "gap"), (packed, 31, "gap"), (os.path.join(plain, "metrics.jsonl"), 31, "gap")]
    assert lines[0]["value"] == pytest.approx(0.3) and lines[0]["baseline"] == pytest.approx(0.0)
    assert [a["signal"] for a in lines[0]["alarms"]] == ["gap"]
    assert set(lines[0]["unavailable"]) == {"balanced_accuracy", "probe_false_accept"}


def test_overrides_and_a_run_with_nothing_to_see(tmp_path, capsys):
    run = write_run(tmp_path / "run")
    (line,) = replay_lines([run, "--config.monitor.signals=agreement,response_length"], capsys)
    assert line["alarm_step"] is None and line["signal"] is None and line["alarms"] == []
    (line,) = replay_lines([run, "--config.monitor.threshold=2.0"], capsys)
    assert line["alarm_step"] == 37  # 0.27 a step: 7 steps to reach 2.0


@pytest.mark.parametrize("argv,message", [
    (["replay"], "replay needs at least one PATH"),
    (["replay", "/no/such/run"], "PATH '/no/such/run': no such file or folder"),
    (["replay", "RUN", "--config.monitor.slack=-1"], "config.monitor.slack must be >= 0"),
    (["replay", "RUN", "--config.monitor.treshold=1"], "config.monitor.treshold: no such field"),
    (["replay", "RUN", "--config.monitor.action=halt"], "config.monitor.action must be one of"),
    (["replay", "EMPTY"], "the folder has no metrics.jsonl"),
    (["replay", "BAD"], "line 2: not JSON"),
    (["repaly", "RUN"], "give a command: replay | probes, got 'repaly'"),
    (["probes", "--out=x.jsonl"], "--dataset must be one of"),
])
def test_bad_input_is_one_line_naming_the_flag(argv, message, tmp_path):
    run, empty, bad = write_run(tmp_path / "run"), tmp_path / "empty", tmp_path / "bad"
    empty.mkdir()
    bad.mkdir()
    (bad / "metrics.jsonl").write_text('{"step": 1}\n{oops\n')
    names = {"RUN": run, "EMPTY": str(empty), "BAD": str(bad)}
    with pytest.raises(UsageError) as err:
        cli.main(["coop-monitor", *[names.get(a, a) for a in argv]])
    assert message in str(err.value) and "\n" not in str(err.value)


def test_help_lists_the_monitor_fields(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["coop-monitor", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("`coop-monitor`: replay") and "--config.monitor.threshold" in out
    assert "coop-monitor replay PATH..." in out


def test_the_module_runs_as_a_command(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    run = write_run(tmp_path / "run")
    proc = subprocess.run([sys.executable, "-m", "coop_jax.monitor", "replay", run],
                          capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert proc.returncode == 0 and json.loads(proc.stdout)["alarm_step"] == 31
    proc = subprocess.run([sys.executable, "-m", "coop_jax.monitor", "replay", "/no/run"],
                          capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "coop-monitor: error: PATH '/no/run': no such file or folder"


def test_probes_of_a_gsm8k_split(tmp_path, capsys):
    out = tmp_path / "probes.jsonl"
    probes = cli.main(["coop-monitor", "probes", "--dataset=gsm8k",
                       f"--data_dir={REPO / 'tests' / 'fixtures' / 'gsm8k'}",
                       "--num_questions=3", f"--out={out}"])
    assert read_jsonl(out) == probes and len(probes) == 3 * 8
    assert capsys.readouterr().out.startswith(f"wrote 24 probes of 3 questions to {out}")
