"""`coop-eval`: evaluate a policy (greedy / avg@k / pass@k) or a reward model (accuracy / AUC).

    coop-eval (--checkpoint=WORKDIR | --hf=HF_DIR) --dataset=gsm8k [--data_dir=DATA_DIR] \
        [--config=CONFIG.py --config.x=y] [--split=test] [--num_examples=N] [--k=8] \
        [--temperature=0.7] [--top_p=0.95] [--no-greedy] --out=OUT
    coop-eval (--checkpoint=WORKDIR | --hf=RM_DIR) --rm_triples=TRIPLES.jsonl --out=OUT

Writes OUT/report.json and OUT/samples.jsonl. Lengths, template and verifier settings come from
the config (`data.max_prompt_len`, `rollout.max_new_tokens`, `data.prompt_template`,
`verifier.*`, `eval.batch_size`, `rm.max_len`) unless a flag overrides them. An RM's
inputs follow its checkpoint's `rm.question_format` / `truncation_side` and
`data.prompt_template` (RMs saved before those options existed: raw questions, tail kept).
With no --data_dir, gsm8k / math500 / math come from the Hugging Face Hub (pinned, cached).
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from typing import Any

import jax
import ml_collections
from absl import flags
from absl.app import UsageError
from ml_collections import config_flags

from coop_jax import console, hf, parallel
from coop_jax.checkpoint import load_model
from coop_jax.config import (Config, base_config, field_doc, from_saved, resolve_mesh_shape,
                             typed)
from coop_jax.data import (DATASETS, DEFAULT_TEMPLATES, PROMPT_TEMPLATES, SyntheticConfig,
                           format_prompt, load_split)
from coop_jax.eval.evaluate import evaluate_policy, strict_verifiers
from coop_jax.data.sources import check_data_files
from coop_jax.hf.tokenizer import load_tokenizer, prepare_tokenizer
from coop_jax.rm.input import RMInputFormat, read_triples, trained_input_format
from coop_jax.rm.scoring import evaluate_reward_model
from coop_jax.verify import RuleVerifier

DEFAULT_CONFIG = os.path.join(os.path.dirname(__file__), "default_config.py")
# Spellings of "--nogreedy" that absl does not know.
_ARG_ALIASES = {"--no-greedy": "--nogreedy", "--no_greedy": "--nogreedy"}


def define_flags(fv: flags.FlagValues, argv: list[str]) -> None:
    """All coop-eval flags on a fresh FlagValues (so `main` can be called more than once)."""
    config_flags.DEFINE_config_file("config", DEFAULT_CONFIG, "config file (default: the "
                                    "schema defaults)", flag_values=fv, sys_argv=argv)
    d = dict(flag_values=fv)
    flags.DEFINE_string("checkpoint", None, "coop-train workdir or its checkpoints/ folder", **d)
    flags.DEFINE_integer("step", None, "checkpoint step (default: latest)", **d)
    flags.DEFINE_string("hf", None, "Hugging Face model: folder, .gguf file or Hub id", **d)
    flags.DEFINE_string("tokenizer", None, "tokenizer folder (default: the model's)", **d)
    flags.DEFINE_string("dataset", None, "synthetic | gsm8k | math500 | math "
                        "(default: config.data.dataset)", **d)
    flags.DEFINE_string("data_dir", None, "folder with <split>.jsonl or <dataset>/<split>.jsonl",
                        **d)
    flags.DEFINE_string("split", "test", "dataset split", **d)
    flags.DEFINE_integer("num_examples", None, "first N problems (default: all)", **d)
    flags.DEFINE_string("template", None, "prompt template (default: the config's when --config "
                        "or a checkpoint gives one, else the dataset's)", **d)
    flags.DEFINE_boolean("chat", None, "wrap prompts in the chat template", **d)
    flags.DEFINE_integer("k", 8, "samples per problem for avg@k / pass@k (0: none)", **d)
    flags.DEFINE_float("temperature", 0.7, "sampling temperature", **d)
    flags.DEFINE_float("top_p", 0.95, "nucleus sampling threshold", **d)
    flags.DEFINE_boolean("greedy", True, "also decode greedily (--no-greedy to skip)", **d)
    flags.DEFINE_integer("seed", 0, "sampling seed", **d)
    flags.DEFINE_integer("batch_size", None, "prompts (or RM inputs) per batch", **d)
    flags.DEFINE_integer("max_prompt_len", None, "prompt tokens", **d)
    flags.DEFINE_integer("max_new_tokens", None, "response tokens", **d)
    flags.DEFINE_string("rm_triples", None, "JSONL of {question, reference, completion, label}: "
                        "evaluate a reward model instead of a policy", **d)
    flags.DEFINE_integer("max_len", None, "RM input tokens (default: config.rm.max_len)", **d)
    flags.DEFINE_string("out", None, "output folder", **d)
    console.define_print_config(fv)


def _pick(flag_value, default):
    return default if flag_value is None else flag_value


def _validate(f: flags.FlagValues) -> None:
    if not f.checkpoint and not f.hf:
        raise UsageError("neither --checkpoint nor --hf was given; pass one of them")
    if f.checkpoint and f.hf:
        raise UsageError("--checkpoint and --hf are mutually exclusive; pass only one")
    if not f.out:
        raise UsageError("--out is required (the folder for report.json and samples.jsonl)")
    for name in ("num_examples", "batch_size", "max_prompt_len", "max_new_tokens", "max_len"):
        if f[name].value is not None and f[name].value < 1:
            raise UsageError(f"--{name} must be >= 1, got {f[name].value}")
    if f.rm_triples:
        if not os.path.isfile(f.rm_triples):
            raise UsageError(f"--rm_triples: no such file {f.rm_triples!r}")
        return
    if f.k < 0:
        raise UsageError(f"--k must be >= 0, got {f.k}")
    if f.k == 0 and not f.greedy:
        raise UsageError("--k=0 with --no-greedy leaves nothing to evaluate")
    if f.k and f.temperature <= 0:
        raise UsageError(f"--temperature must be > 0 for sampling (--k={f.k}), got "
                         f"{f.temperature}")
    if not 0 < f.top_p <= 1:
        raise UsageError(f"--top_p must be in (0, 1], got {f.top_p}")


def _resolve_config(f: flags.FlagValues, meta: dict | None) -> tuple[Config, bool]:
    """(the typed config, whether it came from the user or the checkpoint rather than the
    defaults): the one conversion of the command's ConfigDict."""
    config, given = _chosen_config(f, meta)
    with console.usage_errors():
        return typed(config), given


def _chosen_config(f: flags.FlagValues, meta: dict | None) -> tuple[ml_collections.ConfigDict,
                                                                    bool]:
    if f["config"].present:
        return f.config, True
    if meta and isinstance(meta.get("config"), dict):
        config = from_saved(meta["config"])
        # an RM saved before the input options existed read raw questions
        trained = trained_input_format(meta["config"])
        config.rm.update(question_format=trained["question_format"],
                         truncation_side=trained["truncation_side"])
        overrides = config_flags.get_override_values(f["config"])
        if overrides:
            config.update_from_flattened_dict(overrides)
        return config, True
    return f.config, False

log = logging.getLogger("coop_jax.eval")


def _load_tokenizer(path: str):
    """AutoTokenizer from a folder ("" = the shipped character tokenizer), pad token ensured."""

    try:
        return prepare_tokenizer(load_tokenizer(path or None))
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot load the tokenizer from {path or 'the char tokenizer'!r}: "
                         f"{e}") from e


def _mesh(f: flags.FlagValues):
    """With several processes, the config's mesh (the model is sharded on it and every host
    evaluates its share of the problems); one process evaluates on one device."""
    if jax.process_count() == 1:
        return None
    return parallel.make_mesh(resolve_mesh_shape(f.config.mesh.shape, jax.device_count()))


def _load_model(f: flags.FlagValues, which: str):
    """(ModelConfig, params, tokenizer, config, config_given, source description)."""
    if f.hf:

        try:  # a folder, a .gguf file (converted once, cached) or a Hub id
            folder = hf.local_folder(f.hf)
        except (OSError, ValueError) as e:
            raise UsageError(f"--hf: {e}") from e
        if not os.path.isfile(os.path.join(folder, "config.json")):
            raise UsageError(f"--hf: no config.json in {f.hf!r}")
        lm = hf.load(folder)
        if f.tokenizer is None and lm.source is None:
            raise UsageError(f"--hf folder {f.hf!r} has no tokenizer files; pass --tokenizer")
        tokenizer = _load_tokenizer(_pick(f.tokenizer, lm.source))
        config, given = _resolve_config(f, None)
        mesh = _mesh(f)
        params = lm.params if mesh is None else parallel.shard_params(lm.params, lm.config, mesh)
        return lm.config, params, tokenizer, config, given, {"hf": os.path.abspath(f.hf)}

    if not os.path.isdir(f.checkpoint):
        raise UsageError(f"--checkpoint: no such folder {f.checkpoint!r}")
    try:
        cfg, params, meta = load_model(f.checkpoint, which=which, step=f.step, mesh=_mesh(f))
    except (ValueError, FileNotFoundError) as e:
        raise UsageError(f"--checkpoint {f.checkpoint}: {e}") from e
    config, given = _resolve_config(f, meta)
    section = config.reward_model if which == "rm" else config.model
    saved = meta.get("rm_tokenizer" if which == "rm" else "tokenizer")
    default = saved if saved is not None else (section.tokenizer or section.hf_path or "")
    tokenizer = _load_tokenizer(_pick(f.tokenizer, default))
    source = {"checkpoint": os.path.abspath(f.checkpoint), "step": meta.get("step", f.step)}
    return cfg, params, tokenizer, config, given, source


def _prompt_len(f: flags.FlagValues, config, config_given: bool, tokenizer, records, template,
                chat: bool) -> int:
    """--max_prompt_len, else the config's when one is given, else the longest prompt's length.
    A chat prompt is cut on the left, through its template: a length that cuts one is an error."""
    lengths = [len(tokenizer(format_prompt(template, r["question"], tokenizer=tokenizer,
                                           chat=chat), add_special_tokens=False)["input_ids"])
               for r in records]
    if f.max_prompt_len is None and not config_given:
        return max(lengths)
    chosen = int(_pick(f.max_prompt_len, config.data.max_prompt_len))
    cut = sum(n > chosen for n in lengths)
    if chat and cut:
        where = ("--max_prompt_len" if f.max_prompt_len is not None
                 else "the config's data.max_prompt_len")
        raise UsageError(f"{where}={chosen} cuts {cut} of {len(lengths)} chat prompts through "
                         f"the chat template (the longest has {max(lengths)} tokens); raise it "
                         "to at least that")
    return chosen


def _template(f: flags.FlagValues, config, config_given: bool) -> str:
    """--template, else the config's when --config or a checkpoint gives one, else the dataset's
    (a policy's prompts, and an RM's `<question>` with rm.question_format=prompt)."""
    template = _pick(f.template, config.data.prompt_template if config_given
                     else DEFAULT_TEMPLATES.get(_pick(f.dataset, config.data.dataset),
                                                config.data.prompt_template))
    if template not in PROMPT_TEMPLATES:
        raise UsageError(f"--template must be one of {sorted(PROMPT_TEMPLATES)}, got {template!r}")
    return template


def _read_triples(path: str) -> list[dict]:
    try:
        return read_triples(path)
    except (OSError, ValueError) as e:
        raise UsageError(f"--rm_triples: {e}") from e


def _write_outputs(out: str, report: dict, rows: list[dict]) -> None:
    if jax.process_index() != 0:  # every host holds the combined report and rows
        return
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "report.json"), "w") as fh:
        json.dump(report, fh, indent=2, sort_keys=True)
    with open(os.path.join(out, "samples.jsonl"), "w") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")


def _fmt(interval: dict | None, pct: bool = True) -> str:
    if not interval or interval.get("mean") is None:
        return "n/a"
    scale, unit = (100.0, "%") if pct else (1.0, "")
    lo, hi = interval.get("ci_low"), interval.get("ci_high")
    ci = "" if lo is None else f" [{lo * scale:.2f}, {hi * scale:.2f}]"
    return f"{interval['mean'] * scale:.2f}{unit}{ci}"


def summary_lines(report: dict) -> list[str]:
    """Human-readable lines for a policy or RM report."""
    if report.get("mode") == "rm":
        return [f"triples: {report['num_triples']} ({report['num_positive']} positive)",
                f"accuracy: {_fmt(report['accuracy'])}",
                f"ROC AUC:  {_fmt(report['roc_auc'], pct=False)}"]
    lines = [f"problems: {report['num_problems']}  ({report.get('dataset')}/"
             f"{report.get('split')})"]
    if "greedy_accuracy" in report:
        lines.append(f"greedy accuracy: {_fmt(report['greedy_accuracy'])}")
    if report.get("k"):
        k = report["k"]
        lines += [f"avg@{k}: {_fmt(report['avg_at_k'])}", f"pass@{k}: {_fmt(report['pass_at_k'])}"]
    lines.append(f"mean response length: {_fmt(report['mean_response_length'], pct=False)} tokens")
    return lines


def _evaluate_rm(f, t0: float) -> dict:

    cfg, params, tokenizer, config, config_given, source = _load_model(f, "rm")
    if not cfg.is_reward_model:
        raise UsageError("--rm_triples needs a reward model, but the loaded model is a causal LM "
                         "(use a *ForSequenceClassification folder or a checkpoint with an RM)")
    triples = _read_triples(f.rm_triples)
    try:
        fmt = RMInputFormat.from_config(config, max_len=_pick(f.max_len, 0),
                              template=_template(f, config, config_given))
    except ValueError as e:
        raise UsageError(str(e)) from e
    try:
        report, rows = evaluate_reward_model(
            params, cfg, tokenizer, triples, fmt=fmt,
            batch_size=_pick(f.batch_size, config.eval.batch_size))
    except ValueError as e:
        raise UsageError(f"--rm_triples {f.rm_triples}: {e}") from e
    report.update(mode="rm", source=source, rm_triples=os.path.abspath(f.rm_triples),
                  wall_seconds=time.time() - t0)
    _write_outputs(f.out, report, rows)
    return report


def _evaluate_policy(f, t0: float) -> dict:

    cfg, params, tokenizer, config, config_given, source = _load_model(f, "policy")
    if cfg.is_reward_model:
        raise UsageError("the loaded model is a reward model; pass --rm_triples to evaluate it")
    cfg = cfg.with_kernels(config.kernels.impl)
    dataset = _pick(f.dataset, config.data.dataset)
    if dataset not in DATASETS:
        raise UsageError(f"--dataset must be one of {list(DATASETS)}, got {dataset!r}")
    data_dir = _pick(f.data_dir, config.data.data_dir) or None
    template = _template(f, config, config_given)
    chat = bool(_pick(f.chat, config.data.chat_template))
    if chat and not getattr(tokenizer, "chat_template", None):
        raise UsageError("--chat (or config.data.chat_template) needs a tokenizer with a chat "
                         "template; this one has none")
    synthetic = (SyntheticConfig(**config.data.synthetic.to_dict())
                 if dataset == "synthetic" else None)
    try:
        records = load_split(dataset, f.split, data_dir=data_dir, num_examples=f.num_examples,
                             seed=int(config.seed), synthetic=synthetic)
    except (ValueError, FileNotFoundError) as e:
        raise UsageError(f"--dataset={dataset} --split={f.split}: {e}") from e
    log.info("evaluating %d %s/%s problems, template %r", len(records), dataset, f.split,
                 template)
    workers, timeout = int(config.verifier.num_workers), float(config.verifier.timeout_s)
    with contextlib.ExitStack() as stack:
        verifier = stack.enter_context(RuleVerifier(num_workers=workers, timeout_s=timeout))
        report, rows = evaluate_policy(
            params, cfg, tokenizer, records, template=template, chat=chat, verifier=verifier,
            k=f.k, temperature=f.temperature, top_p=f.top_p, greedy=f.greedy,
            max_prompt_len=_prompt_len(f, config, config_given, tokenizer, records, template,
                                       chat),
            max_new_tokens=_pick(f.max_new_tokens, config.rollout.max_new_tokens),
            batch_size=_pick(f.batch_size, config.eval.batch_size), seed=f.seed,
            also=strict_verifiers(dataset, workers, timeout, stack))
    report.update(mode="policy", source=source, dataset=dataset, split=f.split,
                  headline_verifier="lenient",
                  data_dir=os.path.abspath(data_dir) if data_dir else None,
                  wall_seconds=time.time() - t0)
    _write_outputs(f.out, report, rows)
    return report


def _check_paths(f: flags.FlagValues) -> None:
    """The data files the flags and --config name, before the model loads (a checkpoint's own
    config, which may name the dataset, is only read with the model)."""
    if f.rm_triples:
        return
    known = f["config"].present or f.hf or f.dataset is not None
    check_data_files("--data_dir" if f.data_dir is not None else "config.data.data_dir",
                             _pick(f.dataset, f.config.data.dataset) if known else None,
                             _pick(f.data_dir, f.config.data.data_dir), {"--split": f.split})


def main(argv: list[str]) -> dict[str, Any]:
    """Parse `argv` (argv[0] is the program name), evaluate, write OUT/, return the report
    (`--print_config`: print the config, return {})."""
    argv = [_ARG_ALIASES.get(a, a) for a in argv]
    fv = console.parse_flags(define_flags, argv, __doc__)
    if fv.print_config:
        console.print_config(fv.config, base_config(), field_doc)
        return {}
    _validate(fv)
    _check_paths(fv)
    parallel.maybe_initialize_distributed(fv.config.mesh)
    t0 = time.time()
    report = _evaluate_rm(fv, t0) if fv.rm_triples else _evaluate_policy(fv, t0)
    if jax.process_index() == 0:
        for line in summary_lines(report):
            print(line)
        print(f"wrote {os.path.join(fv.out, 'report.json')} and samples.jsonl")
    return report


def run() -> None:
    """Console-script entry point."""
    console.run_console(main, "coop-eval")


if __name__ == "__main__":
    run()
