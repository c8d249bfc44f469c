"""parallel.maybe_initialize_distributed: where the coordinator settings come from, and the errors
(jax.distributed.initialize replaced by a recorder), plus the config fields' validation."""
import jax
import ml_collections
import pytest

from coop_jax import config as config_lib
from coop_jax.parallel import mesh as mesh_lib

VARS = [f"{prefix}_{name}" for prefix in ("COOP", "JAX")
        for name in ("COORDINATOR_ADDRESS", "NUM_PROCESSES", "PROCESS_ID")]


def section(**fields):
    return ml_collections.ConfigDict(dict(dict(shape=(-1, 1, 1), distributed=True,
                                               coordinator_address="", num_processes=0,
                                               process_id=-1), **fields))


@pytest.fixture
def calls(monkeypatch):
    """The kwargs of every jax.distributed.initialize call; nothing is really started."""
    for var in VARS:
        monkeypatch.delenv(var, raising=False)
    recorded = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: recorded.append(kw))
    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(mesh_lib, "_backend_started", lambda: False)
    return recorded


def test_disabled_does_nothing(calls, monkeypatch):
    monkeypatch.setenv("COOP_COORDINATOR_ADDRESS", "h:1")
    mesh_lib.maybe_initialize_distributed(section(distributed=False))
    mesh_lib.maybe_initialize_distributed(False)
    assert calls == []


def test_config_fields_win_over_the_environment(calls, monkeypatch):
    monkeypatch.setenv("COOP_COORDINATOR_ADDRESS", "env:9")
    monkeypatch.setenv("COOP_NUM_PROCESSES", "8")
    monkeypatch.setenv("COOP_PROCESS_ID", "7")
    mesh_lib.maybe_initialize_distributed(section(coordinator_address="head:1234",
                                                  num_processes=2, process_id=1))
    assert calls == [dict(coordinator_address="head:1234", num_processes=2, process_id=1)]


def test_environment_variables(calls, monkeypatch):
    monkeypatch.setenv("COOP_COORDINATOR_ADDRESS", "127.0.0.1:5000")
    monkeypatch.setenv("COOP_NUM_PROCESSES", "4")
    monkeypatch.setenv("COOP_PROCESS_ID", "3")
    monkeypatch.setenv("JAX_PROCESS_ID", "0")  # COOP_* first
    mesh_lib.maybe_initialize_distributed(section())
    assert calls == [dict(coordinator_address="127.0.0.1:5000", num_processes=4, process_id=3)]


def test_fields_mix_sources_and_a_bool_reads_the_environment(calls, monkeypatch):
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "node0:20000")
    monkeypatch.setenv("JAX_NUM_PROCESSES", "2")
    mesh_lib.maybe_initialize_distributed(section(process_id=1))
    monkeypatch.setenv("JAX_PROCESS_ID", "0")
    mesh_lib.maybe_initialize_distributed(True)
    assert calls == [dict(coordinator_address="node0:20000", num_processes=2, process_id=1),
                     dict(coordinator_address="node0:20000", num_processes=2, process_id=0)]


@pytest.mark.parametrize("fields, env, missing", [
    (dict(coordinator_address="head:1234"), {}, ["mesh.num_processes", "mesh.process_id"]),
    (dict(num_processes=2, process_id=0), {}, ["mesh.coordinator_address"]),
    ({}, {"COOP_NUM_PROCESSES": "2"}, ["mesh.coordinator_address", "mesh.process_id"]),
])
def test_partial_settings_name_the_missing_fields(calls, monkeypatch, fields, env, missing):
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    with pytest.raises(ValueError) as info:
        mesh_lib.maybe_initialize_distributed(section(**fields))
    message = str(info.value)
    assert "\n" not in message and all(m in message for m in missing)
    assert calls == []


def test_nothing_given_auto_detects(calls, monkeypatch):
    mesh_lib.maybe_initialize_distributed(section())
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "node0:20000")  # SLURM gives the rest
    mesh_lib.maybe_initialize_distributed(section())
    assert calls == [{}, {}]


def test_auto_detect_failure_names_the_fields(calls, monkeypatch):
    def fail(**kw):
        raise ValueError("coordinator_address should be defined.")
    monkeypatch.setattr(jax.distributed, "initialize", fail)
    with pytest.raises(ValueError) as info:
        mesh_lib.maybe_initialize_distributed(section())
    message = str(info.value)
    assert "\n" not in message and "coordinator_address should be defined" in message
    for name in ("mesh.coordinator_address", "mesh.num_processes", "mesh.process_id",
                 "COOP_COORDINATOR_ADDRESS", "COOP_NUM_PROCESSES", "COOP_PROCESS_ID"):
        assert name in message


def test_already_initialised_is_left_alone(calls, monkeypatch):
    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: True)
    mesh_lib.maybe_initialize_distributed(section(coordinator_address="h:1", num_processes=2,
                                                  process_id=0))
    assert calls == []


@pytest.mark.parametrize("fields, env, match", [
    (dict(coordinator_address="head:1", num_processes=2, process_id=2), {},
     r"mesh.process_id must be an integer in \[0, 2\)"),
    (dict(coordinator_address="nohost", num_processes=2, process_id=0), {},
     "mesh.coordinator_address must be 'host:port'"),
    ({}, {"COOP_COORDINATOR_ADDRESS": "h:1", "COOP_NUM_PROCESSES": "two",
          "COOP_PROCESS_ID": "0"}, "COOP_NUM_PROCESSES must be an integer"),
])
def test_bad_values_name_their_source(calls, monkeypatch, fields, env, match):
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    with pytest.raises(ValueError, match=match):
        mesh_lib.maybe_initialize_distributed(section(**fields))
    assert calls == []


def test_after_jax_started_is_an_error(calls, monkeypatch):
    monkeypatch.setattr(mesh_lib, "_backend_started", lambda: True)
    with pytest.raises(RuntimeError, match="before any JAX computation"):
        mesh_lib.maybe_initialize_distributed(section())


def test_cpu_collectives_default_to_gloo(monkeypatch):
    name = "jax_cpu_collectives_implementation"
    before = getattr(jax.config, name)
    try:
        monkeypatch.delenv("JAX_CPU_COLLECTIVES_IMPLEMENTATION", raising=False)
        jax.config.update(name, None)
        mesh_lib._use_gloo_on_cpu()
        assert getattr(jax.config, name) == "gloo"
        monkeypatch.setenv("JAX_CPU_COLLECTIVES_IMPLEMENTATION", "mpi")  # the user's choice
        jax.config.update(name, None)
        mesh_lib._use_gloo_on_cpu()
        assert getattr(jax.config, name) is None
    finally:
        jax.config.update(name, before)


def test_config_defaults_validate():
    c = config_lib.base_config()
    assert (c.mesh.coordinator_address, c.mesh.num_processes, c.mesh.process_id) == ("", 0, -1)
    config_lib.validate(c)
    del c.mesh.coordinator_address  # a config whose mesh section lacks a field: named
    with pytest.raises(ValueError, match="config.mesh.coordinator_address is missing"):
        config_lib.validate(c)


@pytest.mark.parametrize("field, value, match", [
    ("coordinator_address", "head", "config.mesh.coordinator_address must be 'host:port'"),
    ("coordinator_address", "head:99999", "config.mesh.coordinator_address"),
    ("num_processes", -1, "config.mesh.num_processes must be an integer >= 0"),
    ("process_id", -2, "config.mesh.process_id must be an integer >= -1"),
    ("process_id", 2, r"config.mesh.process_id \(2\) must be < mesh.num_processes \(2\)"),
])
def test_config_validation(field, value, match):
    c = config_lib.base_config()
    c.mesh.num_processes = 2
    c.mesh[field] = value
    with pytest.raises(ValueError, match=match):
        config_lib.validate(c)
