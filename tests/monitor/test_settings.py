"""The `monitor` section: its defaults are the settings' defaults, every field is documented, and
a bad value is one ValueError line naming `config.monitor.<field>`."""
import dataclasses

import pytest

from coop_jax.monitor import FIELD_DOCS, MonitorSettings, monitor_section


def test_the_section_and_the_settings_agree():
    section = monitor_section()
    assert MonitorSettings.from_dict(section) == MonitorSettings()
    assert set(section) == set(FIELD_DOCS) == {f.name for f in dataclasses.fields(MonitorSettings)}
    assert MonitorSettings().to_dict() == section.to_dict()


def test_signals_are_parsed_from_the_comma_separated_field():
    settings = MonitorSettings.from_dict(dict(monitor_section(), signals="gap, response_length"))
    assert settings.watched == ("gap", "response_length")
    assert MonitorSettings.from_dict(dict(monitor_section(), signals="")).watched == ()


@pytest.mark.parametrize("field,value,message", [
    ("action", "halt", "config.monitor.action must be one of ['warn', 'stop']"),
    ("signals", "gap,gapp", "config.monitor.signals must be comma-separated names of gap, "
                            "agreement, balanced_accuracy, probe_false_accept, response_length, "
                            "marker_rate, truncation, each once (unknown signal 'gapp')"),
    ("signals", "gap,gap", "config.monitor.signals must be comma-separated names of"),
    ("warmup_steps", 0, "config.monitor.warmup_steps must be >= 1"),
    ("warmup_steps", 2.5, "config.monitor.warmup_steps must be an integer"),
    ("slack", -0.1, "config.monitor.slack must be >= 0"),
    ("threshold", 0.0, "config.monitor.threshold must be > 0"),
    ("probe_rise", "x", "config.monitor.probe_rise must be a number"),
    ("enabled", "yes", "config.monitor.enabled must be True or False"),
    ("noise_scaled", 1, "config.monitor.noise_scaled must be True or False"),
])
def test_a_bad_value_names_its_field_in_one_line(field, value, message):
    with pytest.raises(ValueError) as err:
        MonitorSettings.from_dict(dict(monitor_section(), **{field: value}))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_an_unknown_field_is_named():
    with pytest.raises(ValueError, match=r"^config.monitor.treshold: no such field"):
        MonitorSettings.from_dict(dict(monitor_section(), treshold=0.5))
