"""coop-train with the reward-hacking monitor on (`monitor.enabled`), on a made-up hacked metric
stream: the tiny run's rows get a proxy reward that leaves the rule accuracy at a chosen step.
The alarm is a log line and an event in metrics.jsonl (and in the offline W&B run), every row is
seen from step 0 on, `checkpoint_on_alarm` saves the alarm's step, `stop` checkpoints and ends
the run, and a resumed run replays the kept rows so it alarms where an uninterrupted one would."""
import json
import logging
import os

import pytest

from conftest import repo_config
from test_metrics_writer import wandb_history

from coop_jax import checkpoint, config as config_lib
from coop_jax.monitor.live import RunMonitor
from coop_jax.trainer import loop


def hacked_trainer(c, workdir: str, hack_from: int) -> loop.Trainer:
    """A Trainer whose step rows report a gap (proxy reward - rule accuracy) of about 0 (noise
    0.01), and of 0.6 from step `hack_from` on."""
    trainer = loop.Trainer(config_lib.typed(c), workdir)
    update = trainer.update

    def update_and_hack(step, prepared, nan_skips):
        metrics, nan_skips = update(step, prepared, nan_skips)
        done = step + 1
        gap = (0.6 if done >= hack_from else 0.0) + 0.01 * (done % 2)
        return metrics | {"rule_accuracy": 0.3, "proxy_reward_mean": 0.3 + gap}, nan_skips

    trainer.update = update_and_hack
    return trainer


def monitored_config(steps: int, action: str):
    c = repo_config("tiny_test")
    c.monitor.update(enabled=True, action=action, signals="gap", warmup_steps=2)
    c.train.update(steps=steps, checkpoint_every=0)
    return c


def rows_of(workdir) -> list[dict]:
    with open(os.path.join(workdir, "metrics.jsonl")) as fh:
        return [json.loads(line) for line in fh]


def alarm_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "monitor: ALARM" in r.getMessage()]


def test_warn_logs_the_alarm_line_and_event_and_checkpoints_its_step(tmp_path, caplog,
                                                                     monkeypatch):
    pytest.importorskip("wandb")
    for key in ("WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    seen = []
    observe = RunMonitor.observe
    monkeypatch.setattr(RunMonitor, "observe",
                        lambda self, row: seen.append(row["step"]) or observe(self, row))
    c = monitored_config(steps=4, action="warn")
    c.wandb.update(project="coop-monitor-test", mode="offline")
    c.train.keep_checkpoints = 1
    caplog.set_level(logging.INFO, logger="coop_jax")
    summary = hacked_trainer(c, str(tmp_path), hack_from=3).run()
    assert summary["steps"] == 4 and seen == [0, 1, 2, 3, 4]
    header = [r.getMessage() for r in caplog.records if r.getMessage().startswith("monitor: on")]
    assert header == ["monitor: on (action warn); watching no signal"]  # a rule run
    # baseline: the gap of steps 1 and 2 (0.01, 0.00); step 3's 0.61 - 0.005 - 0.03 >= 0.5
    lines = alarm_lines(caplog)
    assert len(lines) == 1 and lines[0].startswith("monitor: ALARM at step 3: gap = 0.61 ")
    rows = rows_of(tmp_path)
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    assert [r.get("monitor/alarm/gap") for r in rows] == [None, None, None, pytest.approx(0.61),
                                                          None]
    assert "monitor/gap" not in rows[2] and rows[4]["monitor/gap"] > rows[3]["monitor/gap"]
    # checkpoint_on_alarm: step 3 saved, and kept beside the last when only 1 is kept (step 0 is
    # rotated out)
    assert checkpoint.Checkpointer(str(tmp_path / "checkpoints")).all_steps() == [3, 4]
    import wandb
    wandb.teardown()  # waits for W&B's service to write the run's file
    history = wandb_history(str(tmp_path / "wandb"))
    assert [h.get("monitor/alarm/gap") for h in history if h["_step"] == 3] == [
        pytest.approx(0.61)]


def test_stop_checkpoints_and_stops_and_a_resume_replays_the_kept_rows(tmp_path, caplog):
    """The run is interrupted (it ends) at step 2, inside the warm-up's baseline; resumed to 6
    steps, its monitor keeps the baseline of steps 1-2 from the kept rows and alarms at step 3,
    as an uninterrupted run does (without the replay, the hacked steps 3-4 would be its baseline
    and nothing would fire)."""
    workdir = str(tmp_path)
    hacked_trainer(monitored_config(steps=2, action="stop"), workdir, hack_from=3).run()
    caplog.set_level(logging.INFO, logger="coop_jax")
    out = hacked_trainer(monitored_config(steps=6, action="stop"), workdir, hack_from=3).run()
    assert out["stopped_at"] == 3 and out["stopped_by"] == "monitor"
    assert [a["signal"] for a in out["alarms"]] == ["gap"]
    assert "monitor: replayed the kept metrics up to step 2 (no alarm)" in caplog.messages
    lines = alarm_lines(caplog)
    assert len(lines) == 1 and lines[0].startswith("monitor: ALARM at step 3: gap")
    assert lines[0].endswith("action: stop")
    rows = rows_of(workdir)
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert rows[3]["monitor/alarm/gap"] == pytest.approx(0.61)
    assert checkpoint.Checkpointer(os.path.join(workdir, "checkpoints")).latest_step() == 3
    assert os.path.exists(os.path.join(workdir, "curves.png"))
