"""Shared entry-point wrapper of the absl-flag console scripts: `--help`, `--print_config`, the
checks of the files a command line names, and user-input errors as one line (`prog: error: ...`,
status 2) instead of a traceback. Only known user-input errors become `UsageError`s (bad flags,
unknown config fields, validators' messages, missing files); anything else still raises."""
from __future__ import annotations

import contextlib
import difflib
import logging
import os
import re
import sys
from typing import Any, Callable, Iterator, Mapping

import ml_collections
from absl import flags
from absl.app import UsageError
from ml_collections.config_flags import config_flags  # the module: its parser classes

Define = Callable[[flags.FlagValues, list[str]], None]
HELP_ARGS = ("-h", "-?", "-help", "--help", "--helpshort", "--helpfull")
_OVERRIDE = re.compile(r"^--?(?:no)?config\.([^=]+)")
_CONFIG_FILE = re.compile(r"^--?config(?:=(.*))?$")


def one_line(message: Any) -> str:
    return " ".join(str(message).split())


def parse_flags(define: Define, argv: list[str], doc: str = "",
                fields: Mapping[str, str] | None = None) -> flags.FlagValues:
    """`parse_args` for a command without positional arguments (a stray one is a UsageError)."""
    fv, rest = parse_args(define, argv, doc, fields)
    if len(rest) > 1:
        raise UsageError(f"unexpected positional arguments: {rest[1:]}")
    return fv


def parse_args(define: Define, argv: list[str], doc: str = "",
               fields: Mapping[str, str] | None = None) -> tuple[flags.FlagValues, list[str]]:
    """(fresh FlagValues defined by `define(fv, argv)` and parsed, so `main(argv)` can be called
    in-process; the positional arguments, argv[0] first). `--help` prints `help_text` and exits 0.
    Bad flags, an unknown `--config.FIELD` and a missing `--config` file raise UsageError."""
    if any(arg in HELP_ARGS for arg in argv[1:]):
        print(help_text(define, argv[0], doc, fields))
        raise SystemExit(0)
    fv = flags.FlagValues()
    try:
        define(fv, argv)  # a default config file is loaded (and overridden) here already
        _check_config_file(fv, argv)
        return fv, fv(argv)
    except flags.Error as e:
        raise UsageError(one_line(e)) from e
    except (KeyError, AttributeError) as e:  # how ml_collections reports an unknown field
        error = _unknown_field(define, argv)
        if error is None:
            raise
        raise error from e


def _check_config_file(fv: flags.FlagValues, argv: list[str]) -> None:
    if "config" not in fv or not isinstance(fv["config"].parser, config_flags.ConfigFileFlagParser):
        return
    for i, arg in enumerate(argv):
        match = _CONFIG_FILE.match(arg)
        if not match:
            continue
        path = match.group(1) if match.group(1) is not None else "".join(argv[i + 1:i + 2])
        if not os.path.isfile(path.split(":", 1)[0]):  # FILE:ARG passes ARG to get_config
            raise UsageError(f"--config={path}: no such file")


def _unknown_field(define: Define, argv: list[str]) -> UsageError | None:
    """The error of the first `--config.FIELD` override that names no field (None: none does)."""
    plain = [arg for arg in argv if not _OVERRIDE.match(arg)]
    fv = flags.FlagValues()
    try:
        define(fv, plain)
        fv(plain)
        config = fv["config"].value
    except (flags.Error, KeyError, AttributeError, OSError):
        return None
    for arg in argv:
        match = _OVERRIDE.match(arg)
        if match and _missing_part(config, match.group(1)):
            path = match.group(1)
            return UsageError(f"config.{path}: no such field{_nearest(config, path)}")
    return None


def _missing_part(config: ml_collections.ConfigDict, path: str) -> str | None:
    """The shortest prefix of the dotted `path` that is not a field of `config`."""
    parts, node = path.split("."), config
    for i, part in enumerate(parts):
        if not isinstance(node, ml_collections.ConfigDict) or part not in node:
            return ".".join(parts[:i + 1])
        node = node[part]
    return None


def _nearest(config: ml_collections.ConfigDict, path: str) -> str:
    names = [name for name, _ in config_fields(config, leaves_only=False)]
    close = difflib.get_close_matches(path, names, n=1, cutoff=0.6)
    if close:
        return f"; did you mean config.{close[0]}?"
    parent = _missing_part(config, path).rpartition(".")[0]
    node = _lookup(config, parent) if parent else config
    if isinstance(node, ml_collections.ConfigDict):
        return f" (config{'.' + parent if parent else ''} has: {', '.join(sorted(node))})"
    return ""


def config_fields(config: ml_collections.ConfigDict | dict, prefix: str = "",
                  leaves_only: bool = True) -> Iterator[tuple[str, Any]]:
    """(dotted path, value) of every field, depth first; sections too unless `leaves_only`.
    `config` may also be a saved config (`to_dict()`), whose sections are dicts."""
    for key, value in config.items():
        path = prefix + key
        if isinstance(value, (ml_collections.ConfigDict, dict)):
            if not leaves_only:
                yield path, value
            yield from config_fields(value, path + ".", leaves_only)
        else:
            yield path, value


_MISSING = object()


def _lookup(config: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(config, ml_collections.ConfigDict) or part not in config:
            return _MISSING
        config = config[part]
    return config


# ---------------------------------------------------------------------- --help, --print_config
def define_print_config(fv: flags.FlagValues) -> None:
    flags.DEFINE_boolean("print_config", False, "print every config field (after --config and "
                         "the --config.FIELD overrides): value, default and description; then "
                         "exit", flag_values=fv)


def help_text(define: Define, prog: str, doc: str,
              fields: Mapping[str, str] | None = None) -> str:
    """The command's description (the first paragraph of `doc`, its module docstring), its usage
    lines (the docstring's indented paragraphs) and its own flags with their descriptions;
    `fields`: config fields (dotted path -> description) listed as `--config.FIELD` flags."""
    fv = flags.FlagValues()
    define(fv, [prog])
    paragraphs = [p for p in doc.strip().split("\n\n") if p.strip()]
    lines = [" ".join(paragraphs[0].split())] if paragraphs else []
    usage = [line for p in paragraphs[1:] if all(l.startswith("    ") for l in p.splitlines())
             for line in p.splitlines()]
    if usage:
        lines += ["", "usage:", *map(_unjoin, usage)]
    rows = [row for flag in _own_flags(fv) for row in _flag_rows(flag, fields or {})]
    return "\n".join(lines + ["", "flags:", *(_columns(rows, 30) if rows else [])])


def _unjoin(line: str) -> str:
    """A usage line of a docstring whose `\\` continuations Python joined, split again."""
    return "    " + "\n        ".join(re.split(r" {2,}", line.strip()))


def _own_flags(fv: flags.FlagValues) -> list[flags.Flag]:
    seen: dict[str, flags.Flag] = {}
    for name in fv:
        flag = fv[name]
        if "." not in flag.name:  # not a --config.x override defined by the parse
            seen.setdefault(flag.name, flag)
    return list(seen.values())


def _flag_rows(flag: flags.Flag, fields: Mapping[str, str]) -> list[tuple[str, str]]:
    if not config_flags.is_config_flag(flag):
        form = f"--[no]{flag.name}" if flag.boolean else f"--{flag.name}"
        default = "" if flag.default in (None, "") else f" (default: {flag.default})"
        return [(form, one_line(flag.help) + default)]
    rows = []
    if isinstance(flag.parser, config_flags.ConfigFileFlagParser):
        default = f" (default: {flag.default_as_str})" if isinstance(flag.default, str) else ""
        rows.append(("--config=FILE", one_line(flag.help) + default))
    config = flag.value if isinstance(flag.value, ml_collections.ConfigDict) else None
    for path, doc in fields.items():
        default = _lookup(config, path) if config is not None else _MISSING
        rows.append((f"--config.{path}", doc + ("" if default is _MISSING else
                                                f" (default: {default!r})")))
    rows.append(("--config.FIELD=VALUE", "set one config field, e.g. "
                 "--config.seed=1 (--print_config lists the fields)"))
    return rows


def _columns(rows: list[tuple[str, ...]], *widths: int) -> list[str]:
    """Rows of cells, every cell but the last padded to its column's width (at most `widths`)."""
    cols = [min(w, max(len(r[i]) for r in rows)) for i, w in enumerate(widths)]
    return ["  " + "  ".join([c.ljust(w) for c, w in zip(r, cols)] + [r[-1]]).rstrip()
            for r in rows]


def print_config(config: ml_collections.ConfigDict, schema: ml_collections.ConfigDict,
                 doc: Callable[[str], str]) -> None:
    """Every field of `config`: its value, its default in `schema` and `doc(path)`; `*` marks a
    value other than the default."""
    rows = [("field", " value", " default", "description")]
    for path, value in config_fields(config):
        default = _lookup(schema, path)
        changed = "*" if default is _MISSING or value != default else " "
        rows.append((path, changed + repr(value),
                     " -" if default is _MISSING else " " + repr(default), doc(path)))
    print("\n".join(_columns(rows, 34, 16, 16)))


def log_with_times() -> None:
    """coop_jax's log lines with their times (a training run's log)."""
    log = logging.getLogger("coop_jax")
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


def log_above_bars(logger: logging.Logger) -> contextlib.AbstractContextManager:
    """Within it, the lines `logger` prints to the console (`log_with_times`) go above a tqdm
    progress bar, each on a line of its own, instead of into the bar's line; a logger without a
    console handler of its own is left alone."""
    from tqdm.contrib.logging import logging_redirect_tqdm

    if not any(isinstance(h, logging.StreamHandler) and h.stream in (sys.stderr, sys.stdout)
               for h in logger.handlers):
        return contextlib.nullcontext()
    return logging_redirect_tqdm(loggers=[logger])


# ---------------------------------------------------------------------- checks of user input
@contextlib.contextmanager
def usage_errors() -> Iterator[None]:
    """The ValueErrors of config validators (`config.validate`, `train.validate_config`, ...)
    inside become UsageErrors: they name a field and its allowed values."""
    try:
        yield
    except ValueError as e:
        raise UsageError(one_line(e)) from e


def check_file(field: str, path: str) -> None:
    """UsageError when `path` is given but is not a file."""
    if path and not os.path.isfile(path):
        raise UsageError(f"{field}: no such file {path!r}")


def check_folder(field: str, path: str) -> None:
    """UsageError when `path` is given but is not a folder."""
    if path and not os.path.isdir(path):
        raise UsageError(f"{field}: no such folder {path!r}")


def run_console(main: Callable[[list[str]], Any], prog: str) -> None:
    """`main(sys.argv)` with coop_jax's logging; a UsageError prints `prog: error: ...` (one line)
    and exits with status 2."""
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.WARNING)  # orbax logs every save at INFO
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("coop_jax").setLevel(logging.INFO)
    try:
        main(sys.argv)
    except UsageError as e:
        print(f"{prog}: error: {one_line(e)}", file=sys.stderr)
        sys.exit(2)
    except BrokenPipeError:  # `coop-eval --help | head`: the reader left; nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
