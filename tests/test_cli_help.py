"""The console scripts (and the reward-hacking driver) for a new user: `--help` lists each command's own flags, `--print_config`
shows every field's value, default and description, and user-input errors are one line on
stderr with status 2 (coop_jax.console)."""
import os
import subprocess
import sys

import pytest

from coop_jax import config as config_lib
from coop_jax import console
from coop_jax.checkpoint import export
from coop_jax.trainer import cli
from coop_jax.data import rephrase
from coop_jax.eval import cli as eval_cli
from coop_jax.eval import report
from coop_jax.monitor import cli as monitor_cli
from coop_jax.projects.real_model import verifyrm
from coop_jax.projects.reward_hacking import diagnostic_reruns
from coop_jax.projects.reward_hacking import driver
from coop_jax.rm.train import cli as rm_cli
from conftest import REPO

ROOT = REPO
DEFAULT = str(ROOT / "configs" / "default.py")
HACKING = str(ROOT / "configs" / "toy_hacking.py")
# command -> (its main(argv), flags its --help must list)
COMMANDS = {
    "coop-train": (cli.main, ["--config=FILE", "--config.FIELD=VALUE", "--workdir",
                                "--[no]print_config"]),
    "coop-train-rm": (rm_cli.main, ["--config=FILE", "--config.rm_train.mode",
                                    "--config.rm_train.triples", "--[no]print_config"]),
    "coop-eval": (eval_cli.main, ["--config=FILE", "--checkpoint", "--hf", "--dataset",
                                  "--data_dir", "--[no]greedy", "--out", "--[no]print_config"]),
    "coop-report": (report.main, ["--out", "--group_by"]),
    "coop-monitor": (monitor_cli.main, ["--config.monitor.threshold", "--config.monitor.signals",
                                        "--config.FIELD=VALUE", "--dataset", "--out"]),
    "coop-export": (export.main, ["--checkpoint", "--out", "--which", "--step"]),
    "coop-rephrase": (rephrase.main, ["--config.dataset", "--config.data_dir", "--config.url",
                                      "--config.hf_path", "--[no]print_config"]),
    "coop_jax.projects.reward_hacking": (driver.cli, [
        "--config=FILE", "--config.FIELD=VALUE", "--workdir", "--[no]commit",
        "--[no]print_config"]),
    "coop_jax.projects.reward_hacking.diagnostic_reruns": (diagnostic_reruns.cli, [
        "--config=FILE", "--workdir", "--out", "--questions", "--[no]commit"]),
    "coop_jax.projects.real_model.verifyrm": (verifyrm.cli, [
        "--config=FILE", "--config.FIELD=VALUE", "--workdir", "--results", "--[no]commit",
        "--min_accuracy", "--generator_steps"]),
}


def _env():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    return env


@pytest.mark.parametrize("flag", ["--help", "-h", "--helpfull"])
@pytest.mark.parametrize("prog", sorted(COMMANDS))
def test_help_describes_the_command_and_its_own_flags(prog, flag, capsys):
    main, own = COMMANDS[prog]
    with pytest.raises(SystemExit) as exit_:
        main([prog, flag])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    description, rest = out.split("\n", 1)
    assert prog in description and len(description) > len(prog) + 20
    flag_lines = rest.split("\nflags:\n", 1)[1].splitlines()
    for name in own:
        line = next(line for line in flag_lines if line.split()[0] == name)
        assert len(line.split()) > 2, line  # a description follows the flag
    assert "--alsologtostderr" not in out and "--orbax" not in out  # absl's / orbax's flags


def test_help_of_the_console_script():
    proc = subprocess.run([sys.executable, "-m", "coop_jax.trainer.cli", "--help"], env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "--workdir" in proc.stdout and "usage:" in proc.stdout


def test_every_config_field_has_a_description():
    fields = [path for path, _ in console.config_fields(config_lib.base_config())]
    assert [f for f in fields if not config_lib.FIELD_DOCS.get(f)] == []
    assert sorted(set(config_lib.FIELD_DOCS) - set(fields)) == []  # no stale ones
    own = [path for path, _ in console.config_fields(rephrase.get_config())]
    assert sorted(own) == sorted(rephrase.FIELD_DOCS)


def test_a_field_chosen_from_a_registry_lists_its_names():
    assert all(name in config_lib.field_doc("rl.advantage") for name in ("grpo", "rloo"))
    assert "llama" in config_lib.field_doc("reward_model.family")


def test_print_config_shows_value_default_and_description(capsys):
    assert cli.main(["coop-train", f"--config={DEFAULT}", "--config.rollout.group_size=16",
                       "--print_config"]) == {}
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert rows.keys() - {"field"} == {p for p, _ in console.config_fields(
        config_lib.base_config())}
    group = rows["rollout.group_size"]
    assert group.split()[1:3] == ["*16", "8"]
    assert config_lib.FIELD_DOCS["rollout.group_size"] in group
    assert rows["rl.advantage"].split()[1:3] == ["'grpo'", "'grpo'"] and "rloo" in rows[
        "rl.advantage"]


@pytest.mark.parametrize("prog, args", [
    ("coop-train-rm", ["--config.rm_train.epochs=5"]),
    ("coop-eval", [f"--config={DEFAULT}"]),
    ("coop-rephrase", ["--config.batch_size=4"]),
    ("coop_jax.projects.reward_hacking", [f"--config={HACKING}"]),
])
def test_print_config_of_the_other_commands(prog, args, capsys):
    assert COMMANDS[prog][0]([prog, *args, "--print_config"]) == {}
    out = capsys.readouterr().out
    assert "description" in out.splitlines()[0] and len(out.splitlines()) > 10


def test_print_config_starts_no_jax_backend():
    code = ("from coop_jax.trainer import cli; from coop_jax.parallel import mesh; "
            f"cli.main(['coop-train', '--config={DEFAULT}', '--print_config']); "
            "assert not mesh._backend_started()")
    proc = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


TRAIN = [f"--config={DEFAULT}", "--workdir=unused"]
ERRORS = [
    ("coop-train", TRAIN + ["--config.rl.clip_epss=0.2"],
     "config.rl.clip_epss: no such field; did you mean config.rl.clip_eps_low?"),
    ("coop-train", TRAIN + ["--config.rll.kl_coef=0"],
     "config.rll.kl_coef: no such field; did you mean config.rl.kl_coef?"),
    ("coop-train", TRAIN + ["--config.zzz=1"], "config.zzz: no such field (config has: cooper,"),
    ("coop-train", TRAIN + ["--config.rollout.group_size=1"],
     "config.rollout.group_size must be >= 2 (group-relative advantages), got 1"),
    ("coop-train", TRAIN + ["--config.rl.advantage=grpoo"],
     "config.rl.advantage must be one of"),
    ("coop-train", TRAIN + ["--config.rollout.group_size=abc"],
     "flag --config.rollout.group_size=abc: invalid literal for int()"),
    ("coop-train", TRAIN + ["--config.data.dataset=gsm8k", "--config.data.data_dir=/nonexistent"],
     "config.data.data_dir='/nonexistent': no such folder"),
    ("coop-train", TRAIN + ["--config.data.dataset=gsm8k", f"--config.data.data_dir={ROOT}"],
     f"config.data.data_dir={str(ROOT)!r} has no gsm8k 'train' split"),
    ("coop-train", TRAIN + ["--config.data.dataset=math500", f"--config.data.data_dir={ROOT}"],
     "config.data.train_split='train': math500 has the splits ['test']"),
    ("coop-train", TRAIN + ["--config.model.hf_path=/nonexistent"],
     "config.model.hf_path='/nonexistent': no such folder or .gguf file, and not a Hub id"),
    ("coop-train", ["--config=/nonexistent.py", "--workdir=unused"],
     "--config=/nonexistent.py: no such file"),
    ("coop-train", [f"--config={DEFAULT}"], "--config (a config file"),
    ("coop-train", TRAIN + ["--config.monitor.action=halt"],
     "config.monitor.action must be one of ['warn', 'stop'], got 'halt'"),
    ("coop-train", TRAIN + ["--config.monitor.signals=gap,gapp"],
     "config.monitor.signals must be comma-separated names of"),
    ("coop-train", TRAIN + ["--config.wandb.mode=offlin"], "config.wandb.mode must be one of"),
    ("coop-monitor", ["replay"], "replay needs at least one PATH"),
    # the data is checked before the model loads
    ("coop-eval", ["--hf=/nonexistent", "--dataset=gsm8k", "--data_dir=/nonexistent", "--out=o"],
     "--data_dir='/nonexistent': no such folder"),
    ("coop-eval", ["--config.rl.clip_epss=0.2", "--hf=x", "--out=o"],
     "config.rl.clip_epss: no such field"),
    ("coop-train-rm", ["--config.rm_train.mdoe=train"],
     "config.rm_train.mdoe: no such field; did you mean config.rm_train.mode?"),
    ("coop-train-rm", ["--config.rm_train.mode=build_triples", "--config.rm_train.out=t.jsonl",
                       "--config.rm_train.policy_hf=/nonexistent"],
     "config.rm_train.policy_hf='/nonexistent': no such folder"),
    ("coop-rephrase", ["--config.data_dir=/nonexistent", "--config.out_dir=o",
                       "--config.url=http://x"], "config.data_dir='/nonexistent': no such folder"),
    ("coop-report", ["--bogus"], "Unknown command line flag 'bogus'"),
    ("coop_jax.projects.reward_hacking", [f"--config={HACKING}",
                                             "--config.experiment.methodz=rule"],
     "config.experiment.methodz: no such field; did you mean config.experiment.methods?"),
    ("coop_jax.projects.reward_hacking", [f"--config={HACKING}",
                                             "--config.experiment.methods=rule,bogus"],
     "config.experiment.methods: unknown arm 'bogus'"),
    ("coop_jax.projects.reward_hacking", [f"--config={HACKING}",
                                             "--config.experiment.seeds=0,x"],
     "config.experiment.seeds must be non-negative integers"),
    ("coop_jax.projects.reward_hacking", [f"--config={HACKING}",
                                             "--config.rollout.group_size=1"],
     "config.rollout.group_size must be >= 2"),
    ("coop_jax.projects.reward_hacking.diagnostic_reruns", [f"--config={HACKING}"],
     "--out: required"),
    ("coop_jax.projects.reward_hacking.diagnostic_reruns", [
        f"--config={HACKING}", "--out=o", "--config.experiment.results_dir=/nonexistent"],
     "config.experiment.results_dir '/nonexistent' keeps no plan inputs"),
    ("coop-export", ["--checkpoint=/nonexistent", "--out=o"],
     "--checkpoint: no such folder '/nonexistent'"),
]


@pytest.mark.parametrize("prog, args, message", ERRORS)
def test_user_errors_are_one_line_with_status_2(prog, args, message, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", [prog, *args])
    with pytest.raises(SystemExit) as exit_:
        console.run_console(COMMANDS[prog][0], prog)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: {message}"), err


def test_the_console_script_prints_one_line():
    proc = subprocess.run([sys.executable, "-m", "coop_jax.trainer.cli", *TRAIN,
                           "--config.rl.clip_epss=0.2"], env=_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == ("coop-train: error: config.rl.clip_epss: no such field; did "
                                   "you mean config.rl.clip_eps_low?")


def test_other_errors_keep_their_traceback(monkeypatch, tmp_path):
    """Only known user-input errors become one line: a ValueError of the run itself raises."""
    def broken(config, workdir):
        raise ValueError("a bug")
    monkeypatch.setattr(cli, "train", broken)
    monkeypatch.setattr(console, "log_with_times", lambda: None)
    with pytest.raises(ValueError, match="a bug"):
        cli.main(["coop-train", f"--config={DEFAULT}", f"--workdir={tmp_path}"])


def test_help_into_a_closed_pipe_is_quiet():
    """`coop-eval --help | head -1`: the reader is gone before the help is written."""
    proc = subprocess.Popen([sys.executable, "-m", "coop_jax.eval.cli", "--help"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and b"Traceback" not in err, err.decode()[-2000:]
