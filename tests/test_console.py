"""coop_jax.console's log lines beside a progress bar: each line the run logs (the monitor's
alarms, warnings) stands on a line of its own above the bar, not glued to the bar's line."""
import logging
import sys

import tqdm

from coop_jax import console


def test_log_lines_go_above_the_bar(capsys):
    logger = logging.getLogger("coop_jax.test_console")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger.handlers, logger.propagate = [handler], False
    with console.log_above_bars(logger):
        bar = tqdm.tqdm(range(3), desc="coop-train", file=sys.stderr)
        for step in bar:
            bar.set_postfix(step=step)
            if step == 1:
                logger.warning("monitor: ALARM at step 2: gap = 0.1")
    assert logger.handlers == [handler]  # as before, after it
    err = capsys.readouterr().err
    lines = [line.strip() for line in err.replace("\r", "\n").split("\n")]
    assert "WARNING monitor: ALARM at step 2: gap = 0.1" in lines  # the whole line, alone
    # without it, the line is written after the bar's text, on the bar's line
    bar = tqdm.tqdm(range(1), desc="coop-train", file=sys.stderr)
    for _ in bar:
        logger.warning("alone?")
    err = capsys.readouterr().err
    assert "WARNING alone?" not in [line.strip() for line in err.replace("\r", "\n").split("\n")]


def test_a_logger_without_a_console_handler_is_left_alone():
    logger = logging.getLogger("coop_jax.test_console.quiet")
    logger.handlers = []
    with console.log_above_bars(logger):
        assert logger.handlers == []
