"""The typed schema (coop_jax.config): a field's type, default, doc and check are declared once;
the docs' overrides are real fields; a wrong value is one line naming the field; renamed fields
keep working for a release."""
import dataclasses
import re

import ml_collections
import pytest
from conftest import REPO, repo_config

from coop_jax import config as config_lib
from coop_jax.config import fields as schema_fields
from coop_jax.config import renames

SECTIONS = {f.name for f in dataclasses.fields(config_lib.Config)}
OVERRIDE = re.compile(r"--config\.([a-z_][a-z0-9_.]*[a-z0-9_])=")
SHOWN_IN = sorted([REPO / "README.md", REPO / "Makefile", *(REPO / "docs").glob("*.md"),
                   *(REPO / "configs").glob("*.py")])


def _shown_overrides() -> dict[str, str]:
    """coop-train overrides the docs show (`--config.section.field=`), by where they are shown;
    other commands' fields (coop-rephrase's `--config.model=`, monitor, a project's experiment)
    are theirs."""
    found = {}
    for path in SHOWN_IN:
        for match in OVERRIDE.finditer(path.read_text(encoding="utf-8")):
            section, _, rest = match.group(1).partition(".")
            if section in SECTIONS and (rest or section == "seed"):
                found.setdefault(match.group(1), path.name)
    return found


def test_every_override_the_docs_show_is_a_current_field_with_its_doc():
    shown = _shown_overrides()
    assert len(shown) >= 10, shown  # the search found the docs' examples
    missing = {p: where for p, where in shown.items() if not config_lib.field_doc(p)}
    renamed = {p: where for p, where in shown.items() if p in renames.RENAMED}
    assert not missing and not renamed, (missing, renamed)


def test_every_field_has_one_doc_and_the_config_files_start_from_its_defaults():
    leaves = dict(config_lib.FIELD_DOCS)
    tree = config_lib.base_config().to_dict()
    flat = {}
    stack = [("", tree)]
    while stack:
        prefix, node = stack.pop()
        for k, v in node.items():
            if isinstance(v, dict):
                stack.append((f"{prefix}{k}.", v))
            else:
                flat[prefix + k] = v
    assert set(flat) == set(leaves)
    assert all(leaves[p] for p in flat)
    typed = config_lib.typed(config_lib.base_config())
    assert typed == config_lib.Config()  # the ConfigDict's defaults are the schema's


@pytest.mark.parametrize("path,value,message", [
    ("rollout.group_size", "8", "config.rollout.group_size must be an integer, got '8'"),
    ("rl.kl_coef", "0.1", "config.rl.kl_coef must be a number, got '0.1'"),
    ("rollout.overlap", 1, "config.rollout.overlap must be True or False, got 1"),
    ("rm.question_format", "raw", "config.rm.question_format must be one of ['prompt', "
                                  "'question'], got 'raw'"),
    ("evals.policy.every", -3, "config.evals.policy.every must be >= -1, got -3"),
])
def test_a_wrong_value_is_one_line_naming_the_field(path, value, message):
    tree = config_lib.base_config().to_dict()
    *parents, leaf = path.split(".")
    node = tree
    for part in parents:
        node = node[part]
    node[leaf] = value
    with pytest.raises(ValueError) as e:
        config_lib.typed(tree)
    assert str(e.value) == message and "\n" not in str(e.value)


def test_a_wrong_type_on_the_command_line_is_one_line_naming_the_field(tmp_path):
    from absl.app import UsageError

    from coop_jax.trainer import cli
    with pytest.raises(UsageError) as e:
        cli.main(["coop-train", "--config=configs/tiny_test.py", f"--workdir={tmp_path}",
                  "--config.rollout.group_size=eight"])
    assert "config.rollout.group_size" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(UsageError, match=r"^config\.rollout\.top_p must be in \(0, 1\], got 2"):
        cli.main(["coop-train", "--config=configs/tiny_test.py", f"--workdir={tmp_path}",
                  "--config.rollout.top_p=2.0"])


def test_the_typed_config_is_frozen_and_keeps_what_a_checkpoint_saves():
    c = config_lib.typed(repo_config("tiny_test"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.rollout.group_size = 4
    assert config_lib.typed(c.to_dict()) == c  # a saved config reads back as it ran


def test_old_names_move_to_the_rm_section_with_one_line_each(caplog):
    c = config_lib.base_config()
    c.cooper.update(rm_checkpoint="/rm", max_len=64, heldout_triples="/h.jsonl")
    c.reward_model.update(question_format="question", truncation_side="right")
    with caplog.at_level("WARNING", logger="coop_jax"):
        rm = config_lib.typed(c).rm
    assert rm == config_lib.RM(checkpoint="/rm", heldout_triples="/h.jsonl", max_len=64,
                               question_format="question", truncation_side="right")
    assert len(caplog.records) == 5
    assert all(r.message.startswith("config.") and "deprecated" in r.message
               and "\n" not in r.message for r in caplog.records)


def test_a_run_saved_before_the_rename_reads_under_the_new_names():
    saved = config_lib.base_config().to_dict()
    for old, new in renames.RENAMED.items():
        section, leaf = old.split(".")
        saved[section][leaf] = renames.get(saved, new)
    del saved["rm"]
    saved["evals"] = "policy,rm_heldout"
    saved["cooper"]["max_len"], saved["train"]["eval_every"] = 64, 20
    c = config_lib.typed(saved, announce=False)
    assert c.rm.max_len == 64 and c.evals == config_lib.Evals(
        {"policy": config_lib.Every(20), "rm_heldout": config_lib.Every(10)})
    rebuilt = config_lib.from_saved(saved)
    assert rebuilt.rm.max_len == 64 and rebuilt.evals.policy.every == 20


def test_sections_declare_their_fields_with_the_schema_helpers():
    """Type, default, doc and check live on the dataclass field, nowhere else."""
    for path, f in schema_fields.fields_of(config_lib.Config):
        if path.startswith("evals."):
            continue
        assert set(f.metadata) == {"doc", "check", "choices"}, path
    assert isinstance(config_lib.base_config().evals, ml_collections.ConfigDict)


def test_a_plugins_own_field_is_kept_where_a_registered_parameter_reads_it():
    """A field no section declares is one line naming it, unless a registered entry's `Param`
    reads it (a plugin's parameter): then the typed config keeps it, and saves it."""
    from coop_jax.registry import Param

    c = config_lib.base_config()
    c.rl.plugin_weight_for_this_test = 0.25
    with pytest.raises(ValueError, match=r"^config.rl.plugin_weight_for_this_test: no such "
                                         r"field \(config.rl has: "):
        config_lib.typed(c)
    param = Param("rl.plugin_weight_for_this_test")
    typed = config_lib.typed(c)
    assert param.read(typed) == 0.25 and typed.rl.plugin_weight_for_this_test == 0.25
    assert typed.to_dict()["rl"]["plugin_weight_for_this_test"] == 0.25
    with pytest.raises(dataclasses.FrozenInstanceError):
        typed.rl.plugin_weight_for_this_test = 1.0
