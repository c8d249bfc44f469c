"""The config: one typed schema, written once, that the ml_collections files and overrides fill.

Config files under `configs/` call `base_config()` (the schema's defaults as a ConfigDict) and
override fields, and `--config.x.y=` overrides work as ml_collections makes them. Each entry point
(coop-train, coop-eval, coop-train-rm, the project drivers) converts that ConfigDict once with
`typed(config)` into a frozen `Config`: every field is checked against its declared type and
rule when its section is built (`fields.Section.build`), a renamed field moves to its new name
with one deprecation line (`renames`), and every error is one line naming the field. Nothing
below the entry points sees a ConfigDict. `field_doc` / `FIELD_DOCS` (what `--print_config`
shows) come from the same declarations.

This package imports no training code: the registries of the training layers (reward types,
negative strategies, evaluators) are checked by `trainer.setup.validate_config`.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import ml_collections
from ml_collections.config_dict import placeholder

from coop_jax.config import renames
from coop_jax.config.fields import Section, defaults, field, fields_of, section
from coop_jax.config.monitor import MonitorSettings, WandB
from coop_jax.config.train_rm import RM_OVERLONG, RM_TRAIN_MODES, RMTrain
from coop_jax.config.schedule import (DEFAULT_EVALS, Eval, Evals, Every, Kernels, Mesh, Train,
                                      resolve_mesh_shape)
from coop_jax.config.sections import (AUTO_EXTRACTION, EVAL_HEADLINES, EXTRACTION_CHOICES,
                                      NAN_POLICIES, RL, RM, SFT, Cooper, Corewarding, Data,
                                      Model, Optim, Probes, Reward, Rollout, Verifier)
from coop_jax.registry import chosen_by, declared_fields

__all__ = ["AUTO_EXTRACTION", "Config", "EVAL_HEADLINES", "EXTRACTION_CHOICES", "FIELD_DOCS",
           "Model", "NAN_POLICIES", "RM", "RMTrain", "RM_OVERLONG", "RM_TRAIN_MODES",
           "base_config", "field_doc", "from_saved", "load_config_file", "model_section",
           "resolve_mesh_shape", "rm_train_section", "typed", "upgraded", "validate",
           "validate_model_section", "validate_rm_train"]


@dataclasses.dataclass(frozen=True)
class Config(Section):
    """A run's whole config. The sections' docs say what each holds."""
    cooper: Cooper = section(Cooper)
    corewarding: Corewarding = section(Corewarding)
    data: Data = section(Data)
    eval: Eval = section(Eval)
    evals: Evals = section(Evals)
    kernels: Kernels = section(Kernels)
    mesh: Mesh = section(Mesh)
    model: Model = section(Model, "policy")
    monitor: MonitorSettings = section(MonitorSettings)
    optim: Optim = section(Optim)
    probes: Probes = section(Probes)
    reward: Reward = section(Reward)
    reward_model: Model = section(Model, "reward model")
    rl: RL = section(RL)
    rm: RM = section(RM)
    rm_train: RMTrain = section(RMTrain)
    rollout: Rollout = section(Rollout)
    seed: int = field(0, "seed of the data order, sampling and random init")
    sft: SFT = section(SFT)
    train: Train = section(Train)
    verifier: Verifier = section(Verifier)
    wandb: WandB = section(WandB)

    def check(self, path: str = "") -> None:
        """The rules between sections."""
        self.model.check_architecture("model")
        r, rows = self.rl, self.rollout.prompts_per_step * self.rollout.group_size
        if rows % r.num_minibatches:
            raise ValueError(f"config.rl.num_minibatches ({r.num_minibatches}) must divide "
                             f"prompts_per_step * group_size ({rows})")
        if self.rollout.prompts_per_step % self.cooper.micro_batches:
            raise ValueError(f"config.cooper.micro_batches ({self.cooper.micro_batches}) must "
                             f"divide rollout.prompts_per_step ({self.rollout.prompts_per_step})"
                             ": one pair per prompt")
        if self.rollout.overlap and r.dynamic_sampling:
            raise ValueError("config.rollout.overlap does not support rl.dynamic_sampling=True "
                             "(its draw count depends on the rewards, so the next batch cannot "
                             "be sampled ahead); set one of them to False")

    def check_devices(self, device_count: int) -> None:
        """The mesh against the devices there are."""
        data_size, fsdp, _ = resolve_mesh_shape(self.mesh.shape, device_count)
        rows = self.rollout.prompts_per_step * self.rollout.group_size
        if rows % (data_size * fsdp):
            raise ValueError(f"config.rollout.prompts_per_step x group_size ({rows}) must be a "
                             f"multiple of the mesh's data x fsdp size ({data_size * fsdp})")


# ---------------------------------------------------------------------- ConfigDict <-> typed
_DEFAULTS = defaults(Config)


def base_config() -> ml_collections.ConfigDict:
    """The schema's defaults as the ConfigDict config files start from; the renamed fields are
    there too, unset, so old files and overrides keep working for one release (`renames`)."""
    c = ml_collections.ConfigDict()
    for name, value in _DEFAULTS.items():
        c[name] = ml_collections.ConfigDict(value) if isinstance(value, dict) else value
    c.rl.clip_ratio_c = placeholder(float)
    for old, new in renames.RENAMED.items():
        section_name, leaf = old.split(".")
        c[section_name][leaf] = placeholder(type(renames.get(_DEFAULTS, new)))
    return c


def model_section(**overrides) -> ml_collections.ConfigDict:
    """A model section's defaults (the schema's `Model`), with `overrides`."""
    s = ml_collections.ConfigDict(defaults(Model))
    s.update(overrides)
    return s


def rm_train_section() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(defaults(RMTrain))


def from_saved(saved: dict, start: ml_collections.ConfigDict | None = None
               ) -> ml_collections.ConfigDict:
    """`start` (else `base_config()`) updated with a checkpoint's saved config (`Config.to_dict()`,
    or the ConfigDict of a run before 0.2, its old names moved to the new), for an entry point to
    override further."""
    config = start if start is not None else base_config()
    config.unlock()
    config.update(ml_collections.ConfigDict(renames.upgrade(saved, _DEFAULTS, announce=False)))
    return config


def upgraded(tree: dict) -> dict:
    """A config tree (plain dicts, e.g. a committed run's saved config) with its old field names
    moved to the new ones, silently (`renames.upgrade`)."""
    return renames.upgrade(tree, _DEFAULTS, announce=False)


def _tree(config) -> dict:
    if isinstance(config, ml_collections.ConfigDict):
        return config.to_dict()
    return dict(config)


def typed(config, announce: bool = True) -> Config:
    """The typed, checked `Config` of a ConfigDict (or a saved config's dict); a `Config` is
    returned as it is. Top-level sections the schema does not know (a project's `experiment`)
    stay with the ConfigDict; a field the schema does not declare is kept where a registered
    entry reads it (`registry.Param`: a plugin's own parameter). ValueError: one line naming the
    field."""
    if isinstance(config, Config):
        return config
    tree = renames.upgrade(_tree(config), _DEFAULTS, announce=announce)
    known = {f.name for f in dataclasses.fields(Config)}
    return Config.build({k: v for k, v in tree.items() if k in known}, "", declared_fields())


def validate(config, device_count: int | None = None) -> Config:
    """Raise ValueError naming the first impossible field of the schema; the typed config."""
    c = typed(config, announce=False)
    if device_count is not None:
        c.check_devices(device_count)
    return c


def validate_model_section(section: Model, field_name: str) -> None:
    """A model section's architecture (the reward model's, when the run has one)."""
    section.check_architecture(field_name)


def validate_rm_train(rm_train) -> RMTrain:
    """Raise ValueError naming the first `rm_train` value coop-train-rm cannot run with."""
    if not isinstance(rm_train, RMTrain):
        rm_train = RMTrain.build(_tree(rm_train), "rm_train")
    rm_train.check_values()
    return rm_train


# ---------------------------------------------------------------------- the fields' docs
def _docs() -> dict[str, str]:
    docs = {}
    for f in dataclasses.fields(Config):
        prefix = f"{f.metadata['doc']}: " if f.metadata["doc"] else ""
        if f.type == "Evals":
            docs.update({f"evals.{name}.every": doc for name, (_, doc) in DEFAULT_EVALS.items()})
        elif f.type in ("int", "float", "str", "bool"):
            docs[f.name] = f.metadata["doc"]
        else:
            docs.update({f"{f.name}.{path}": prefix + _with_choices(sub)
                         for path, sub in fields_of(_SECTIONS[f.type])})
    for old, new in renames.RENAMED.items():
        docs[old] = f"deprecated: now {new} (works until the next release)"
    return docs


def _with_choices(f: dataclasses.Field) -> str:
    doc, choices = f.metadata["doc"], f.metadata["choices"]
    if choices is not None and not all(name in doc for name in choices):
        doc += f" (one of: {', '.join(choices)})"
    return doc


_SECTIONS = {cls.__name__: cls for cls in (Cooper, Corewarding, Data, Eval, Kernels, Mesh, Model,
                                           MonitorSettings, Optim, Probes, Reward, RL, RM, RMTrain,
                                           Rollout, SFT, Train, Verifier, WandB)}
FIELD_DOCS: dict[str, str] = _docs()


def field_doc(path: str) -> str:
    """The one-line description of config field `path` (dotted, "rl.advantage"), with the names
    its registry allows when a registry chooses it ("" for an unknown field)."""
    doc = FIELD_DOCS.get(path, "")
    registry = chosen_by(path) or chosen_by(path.replace("reward_model.", "model.", 1))
    if registry is not None and not all(name in doc for name in registry):
        doc += f" (one of: {', '.join(registry)})"
    return doc


def load_config_file(path: str) -> ml_collections.ConfigDict:
    """`get_config()` of a config file as written (no command-line overrides)."""
    spec = importlib.util.spec_from_file_location("coop_jax_config_file", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()
