"""The docs' commands are real: every command line and `--config.x.y=VALUE` override shown in
README.md, docs/*.md (not docs/results/), the configs' docstrings and the launchers' help text.

Text only, no subprocess: each command's program must exist (a console script of setup.py, a
`python -m coop_jax...` module, a script, a `make` target, a launcher), its flags must be ones
the program defines, a `--config=FILE` must exist, and each override must name a field of the
config the command uses (`coop_jax.config.base_config()` when there is none) with a value that
parses to the field's type, as ml_collections parses it. Repository paths must exist, and no
command may point outside the repository (`../shared/...`: a clone has none). Placeholders are
written `<...>` or `$VAR`, and are skipped; anything else is taken literally, as a reader who
copies the line would.
"""
from __future__ import annotations

import ast
import dataclasses
import difflib
import fnmatch
import functools
import importlib.util
import pathlib
import re
import shlex

import pytest
from conftest import REPO

ROOT = REPO
USER_DOCS = ["README.md"] + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))
CONFIG_FILES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "configs").glob("*.py"))
LAUNCHERS = ["launch/tpu_pod.sh", "launch/gpu_slurm.sh"]
README_MAX_LINES = 110  # a front door: the long paragraphs live in docs/experiments.md

REPO_DIRS = ("configs/", "launch/", "benchmarks/", "coop_jax/", "tests/", "docs/", ".ci/",
             "assets/")
REPO_FILES = ("Makefile", "setup.py")
# flags whose value is written by the command (it need not exist yet)
OUTPUT_FLAGS = {"workdir", "out", "out_dir", "results", "output", "o"}
# every absl and argparse program takes these
HELP_FLAGS = {"help", "helpfull", "helpshort", "h", "?"}
PYTHONS = {"python", "python3"}


# ------------------------------------------------------------------------------ repository facts
@functools.lru_cache(None)
def setup_facts() -> tuple[dict[str, str], set[str]]:
    """({console script: module}, extras) from setup.py's setup() call."""
    scripts, extras = {}, set()
    for node in ast.walk(ast.parse((ROOT / "setup.py").read_text())):
        if not isinstance(node, ast.keyword):
            continue
        if node.arg == "extras_require" and isinstance(node.value, ast.Dict):
            extras = {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
        if node.arg == "entry_points":
            for spec in ast.literal_eval(node.value).get("console_scripts", []):
                name, target = (s.strip() for s in spec.split("="))
                scripts[name] = target.split(":")[0]
    return scripts, extras


@functools.lru_cache(None)
def make_facts() -> tuple[set[str], set[str]]:
    """(targets, variables) of the Makefile."""
    text = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", text, re.M))
    variables = set(re.findall(r"^([A-Za-z_]\w*)\s*[?:+]?=", text, re.M))
    return targets, variables


def module_file(module: str) -> pathlib.Path | None:
    """The source file `python -m module` runs, if the module is in this repository."""
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__main__.py"):
        if path.is_file():
            return path
    return None


@functools.lru_cache(None)
def defined_flags(path: pathlib.Path) -> frozenset[str]:
    """Flag names an absl (DEFINE_*) or argparse (add_argument) program defines in `path`."""
    text = path.read_text()
    names = set(re.findall(r"DEFINE_\w+\(\s*[\"']([\w-]+)[\"']", text))
    for args in re.findall(r"add_argument\(\s*((?:[\"'][^\"']+[\"']\s*,\s*)+)", text):
        names.update(a.lstrip("-") for a in re.findall(r"[\"'](-[^\"']+)[\"']", args))
    return frozenset(names)


def program_flags(module: str) -> frozenset[str]:
    """The flags of a coop_jax program: its module's and the shared console ones
    (`coop_jax/console.py`: --print_config and the like)."""
    path = module_file(module)
    if path is None:
        return frozenset()
    own = defined_flags(path)
    if path.name == "__main__.py":  # a package's entry point: the module it runs defines them
        for target in re.findall(r"^from (coop_jax[\w.]*) import", path.read_text(), re.M):
            own |= defined_flags(module_file(target) or path)
    return own | defined_flags(ROOT / "coop_jax" / "console.py")


@dataclasses.dataclass(frozen=True)
class Launcher:
    flags: dict  # flag -> takes a value
    rules: list  # (flag, kind "=~" | "==", pattern)


@functools.lru_cache(None)
def launcher(path: str) -> Launcher:
    """The options a launcher's `case` accepts and the checks it runs on their values."""
    text = (ROOT / path).read_text()
    flags, var_of = {}, {}
    for pattern, body in re.findall(r"^\s*([-|\w=*]+)\)\s*(.*?);;", text, re.M):
        for alt in pattern.split("|"):
            if alt.startswith("-") and alt != "--":
                name = alt.lstrip("-").removesuffix("=*")
                flags[name] = alt.endswith("=*")
                var = re.match(r"(\w+)=", body.strip())
                if var and alt.endswith("=*"):
                    var_of[var.group(1)] = name
    rules = []
    for var, op, pattern in re.findall(r'\[\[ "\$(\w+)" (=~|==) (\S+) \]\]', text):
        if var in var_of:
            rules.append((var_of[var], op, pattern))
    return Launcher(flags, rules)


# ------------------------------------------------------------------------------ configs
@functools.lru_cache(None)
def load_config(path: str, arg: str | None = None):
    """get_config(arg) of a config file; the SmolLM2 GGUF path is stubbed (no wheel needed)."""
    import coop_jax.hf.sources as sources

    spec = importlib.util.spec_from_file_location(f"_docs_config_{abs(hash(path))}", ROOT / path)
    module = importlib.util.module_from_spec(spec)
    real = sources.smollm2_gguf
    sources.smollm2_gguf = lambda: "/stub/SmolLM2-135M-Instruct.Q4_1.gguf"
    try:
        spec.loader.exec_module(module)
        return module.get_config(arg) if arg is not None else module.get_config()
    finally:
        sources.smollm2_gguf = real


@functools.lru_cache(None)
def base_config():
    from coop_jax.config import base_config as base
    return base()


@functools.lru_cache(None)
def monitor_config():
    from coop_jax.monitor.cli import replay_config
    return replay_config()


@functools.lru_cache(None)
def rephrase_config():
    from coop_jax.data.rephrase import get_config
    return get_config()


def leaves(config, prefix: str = "") -> list[str]:
    import ml_collections
    out = []
    for key in config.keys():
        value = config[key]
        if isinstance(value, ml_collections.ConfigDict):
            out += leaves(value, f"{prefix}{key}.")
        else:
            out.append(prefix + key)
    return out


def is_placeholder(value: str) -> bool:
    return "<" in value or "$" in value or "..." in value or "…" in value


def field_value(config, path: str):
    """The field's value, or raise KeyError."""
    import ml_collections
    node = config
    for part in path.split("."):
        if not isinstance(node, ml_collections.ConfigDict) or part not in node.keys():
            raise KeyError(path)
        node = node[part]
    return node


def parse_as(default, value: str):
    """VALUE parsed as the command line parses it for a field holding `default` (ValueError)."""
    from absl import flags
    from ml_collections.config_flags import tuple_parser
    import ml_collections

    if isinstance(default, ml_collections.ConfigDict):
        raise ValueError("is a section, not a field")
    if default is None:
        return value
    if isinstance(default, bool):
        return flags.BooleanParser().parse(value)
    if isinstance(default, int):
        return flags.IntegerParser().parse(value)
    if isinstance(default, float):
        return flags.FloatParser().parse(value)
    if isinstance(default, tuple):
        parsed = tuple_parser.TupleParser().parse(value)
        kinds = {type(x) for x in default}
        if len(kinds) == 1:
            (kind,) = kinds
            ok = (int, float) if kind is float else (kind,)
            if any(not isinstance(x, ok) or isinstance(x, bool) != (kind is bool)
                   for x in parsed):
                raise ValueError(f"needs a tuple of {kind.__name__}, got {value!r}")
        return parsed
    return value


def override_problem(path: str, value: str | None, configs: list[tuple[str, object]]) -> str | None:
    """Why `--config.PATH=VALUE` fails against the first of `configs` that has PATH (None: ok)."""
    for _, config in configs:
        try:
            default = field_value(config, path)
        except KeyError:
            continue
        if value is None or is_placeholder(value):
            return None
        if "../" in value:
            return f"{value!r} points outside the repository (a clone has no such folder)"
        try:
            parse_as(default, value)
        except ValueError as e:
            return (f"{value!r} is not a valid {type(default).__name__} "
                    f"({str(e).splitlines()[0]})")
        return None
    name, config = configs[0]
    near = difflib.get_close_matches(path, leaves(config), n=1, cutoff=0.5)
    hint = f" (nearest: {near[0]})" if near else ""
    return f"no field {path!r} in {name}{hint}"


# ------------------------------------------------------------------------------ text → snippets
@dataclasses.dataclass
class Snippet:
    line: int
    text: str
    code: bool  # inside backticks or a fenced block (repository paths are checked there)


SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)


def _join_continuations(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    out, pending = [], None
    for number, line in lines:
        if pending is not None:
            number, line = pending[0], pending[1] + " " + line.strip()
        if line.rstrip().endswith("\\"):
            pending = (number, line.rstrip()[:-1])
            continue
        pending = None
        out.append((number, line))
    if pending:
        out.append(pending)
    return out


def _spans_and_rest(number: int, text: str) -> list[Snippet]:
    """Backtick spans of each paragraph (a span may run over a line break) and the text around
    them, with their line numbers (`number` is the first line's)."""
    out = []
    for para in re.finditer(r"(?:[^\n]|\n(?!\s*\n))+", text):
        first, chunk = number + text.count("\n", 0, para.start()), para.group(0)
        rest, last = [], 0
        for m in SPAN.finditer(chunk):
            out.append(Snippet(first + chunk.count("\n", 0, m.start()),
                               " ".join(m.group(2).split()), True))
            rest.append(chunk[last:m.start()])
            rest.append("\n" * m.group(0).count("\n"))
            last = m.end()
        rest.append(chunk[last:])
        for i, line in enumerate("".join(rest).split("\n")):
            if line.strip():
                out.append(Snippet(first + i, line, False))
    return out


def markdown_snippets(text: str) -> list[Snippet]:
    text = re.sub(r"<!--.*?-->", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    out, block, prose, fence = [], [], [], None
    for number, line in enumerate(text.split("\n"), 1):
        marker = re.match(r"\s*(```|~~~)", line)
        if marker and (fence is None or marker.group(1) == fence):
            if fence is None:
                fence = marker.group(1)
            else:
                out += [Snippet(n, t, True) for n, t in _join_continuations(block)]
                fence, block = None, []
            prose.append("")
            continue
        if fence is not None:
            block.append((number, line))
            prose.append("")
        else:
            prose.append(line)
    out += _spans_and_rest(1, "\n".join(prose))
    return out


def plain_snippets(text: str, first_line: int = 1) -> list[Snippet]:
    """Docstrings and help text: each logical line, and the backtick spans inside it."""
    out = []
    for number, line in _join_continuations(list(enumerate(text.split("\n"), first_line))):
        out += _spans_and_rest(number, line)
    return out


def docstring_of(path: str) -> tuple[str, int]:
    tree = ast.parse((ROOT / path).read_text())
    node = tree.body[0] if tree.body else None
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
        return "", 1
    return ast.get_docstring(tree) or "", node.lineno


def launcher_help(path: str, text: str | None = None) -> tuple[str, int]:
    """The usage heredoc and the header comment of a launcher script (`text`: its content)."""
    text = (ROOT / path).read_text() if text is None else text
    header = []
    for line in text.split("\n")[1:]:
        if not line.startswith("#") or line.startswith("#SBATCH"):
            break
        header.append(line[1:].strip() if line.strip() != "#" else "")
    usage = re.search(r"cat <<'EOF'\n(.*?)\nEOF", text, re.S)
    return "\n".join(header) + "\n" + (usage.group(1) if usage else ""), 2


# ------------------------------------------------------------------------------ checking
def tokens_of(text: str) -> list[str]:
    text = re.sub(r"(^|\s)#.*$", "", text)  # a shell comment (not a '#' inside a word)
    try:
        tokens = shlex.split(text)
    except ValueError:  # prose with an apostrophe
        tokens = text.split()
    out = []
    for token in tokens:
        before = None
        while token != before:
            before = token
            token = token.strip("`")
            if token.startswith("[") and token.endswith("]"):  # "[--dry-run]"
                token = token[1:-1]
            for opener, closer in ("()", "[]"):  # unbalanced brackets of "[--a=b" / "(a | b)"
                if token.startswith(opener) and token.count(opener) > token.count(closer):
                    token = token[1:]
                if token.endswith(closer) and token.count(closer) > token.count(opener):
                    token = token[:-1]
            token = token.rstrip(",;") if token.startswith("--config") else token.rstrip(",;:")
            if token.endswith(".") and not token.endswith(".."):
                token = token[:-1]
        if token and token not in ("...", "…", "|"):
            out.append(token)
    return out


def is_repo_path(token: str) -> bool:
    return token.startswith(REPO_DIRS) or token in REPO_FILES


def path_problem(token: str) -> str | None:
    if is_placeholder(token) or any(c in token for c in "*{}"):
        return None
    path, _, test = token.partition("::")  # a pytest node id
    if path.startswith("configs/"):
        path = path.split(":")[0]  # configs/x.py:ARG
    if not (ROOT / path).exists():
        return f"{path!r} does not exist in the repository"
    if test and f"def {test.split('::')[-1].split('[')[0]}(" not in (ROOT / path).read_text():
        return f"{path} has no test {test!r}"
    return None


def default_config_of(module: str) -> list[tuple[str, object]]:
    """The config a coop_jax program reads its overrides into when no --config is given."""
    if module == "coop_jax.data.rephrase":
        return [("coop-rephrase's config", rephrase_config())]
    if module.startswith("coop_jax.monitor"):
        return [("coop-monitor's config", monitor_config())]
    own = {"coop_jax.projects.reward_hacking": "configs/toy_hacking.py",
           "coop_jax.projects.real_model.lane": "configs/smollm2_arithmetic.py",
           "coop_jax.projects.real_model.verifyrm": "configs/smollm2_arithmetic.py"}.get(module)
    if own:
        return [(own, load_config(own))]
    return [("coop_jax.config.base_config()", base_config())]


class Checker:
    """Collects problems of one source; `default` is the config an override outside any command
    is read against (then any config of configs/, for the sections only one file adds)."""

    def __init__(self, name: str, default: list[tuple[str, object]]):
        self.name, self.default, self.problems = name, default, []

    def report(self, line: int, what: str, message: str) -> None:
        self.problems.append(f"{self.name}:{line}: {what}: {message}")

    def fallback(self) -> list[tuple[str, object]]:
        return self.default + [(path, load_config(path)) for path in CONFIG_FILES] + [
            ("coop-rephrase's config", rephrase_config()),
            ("coop-monitor's config", monitor_config())]

    # -- one snippet
    def snippet(self, s: Snippet) -> None:
        tokens = tokens_of(s.text)
        for part in _split_commands(tokens):
            if part and _program(part) is not None:
                self.command(s.line, part)
            else:
                self.loose(s, part)

    def loose(self, s: Snippet, tokens: list[str]) -> None:
        """Tokens that are not a command: overrides against the source's config, and (in code)
        repository paths and coop_jax module names."""
        for token in tokens:
            if token.startswith("--config."):
                self.override(s.line, token, self.fallback())
            elif s.code and is_repo_path(token):
                problem = path_problem(token)
                if problem:
                    self.report(s.line, token, problem)
            elif s.code and re.fullmatch(r"coop_jax(\.\w+)+", token.removesuffix("()")):
                first = token.removesuffix("()").split(".")[1]
                if not (module_file(f"coop_jax.{first}") or (ROOT / "coop_jax" / first).is_dir()):
                    self.report(s.line, token, f"coop_jax has no module {first!r}")

    def override(self, line: int, token: str, configs) -> None:
        body = token[len("--config."):]
        path, _, value = body.partition("=")
        if is_placeholder(path):  # --config.<section>.<field>=<value>
            return
        problem = override_problem(path, value if "=" in body else None, configs)
        if problem:
            self.report(line, token, problem)

    # -- one command
    def command(self, line: int, tokens: list[str]) -> None:
        start = _program(tokens)
        program, args = tokens[start], tokens[start + 1:]
        what = " ".join(tokens)
        if len(what) > 100:
            what = what[:97] + "..."
        scripts, extras = setup_facts()
        if program in scripts:
            self.flags(line, what, args, scripts[program], program)
        elif program in PYTHONS:
            self.python(line, what, args)
        elif program == "make":
            targets, variables = make_facts()
            for arg in args:
                name = arg.split("=")[0]
                if "=" in arg and name not in variables:
                    self.report(line, what, f"the Makefile has no variable {name!r}")
                elif "=" not in arg and not arg.startswith("-") and arg not in targets:
                    self.report(line, what, f"the Makefile has no target {arg!r}")
        elif program in ("pip", "pip3"):
            for extra in re.findall(r"\.\[([\w,-]+)\]", " ".join(args)):
                for name in extra.split(","):
                    if name not in extras:
                        self.report(line, what, f"setup.py has no extra {name!r}")
        else:  # a launcher, perhaps behind bash / sbatch
            self.launch(line, what, program, args)

    def config_of(self, line: int, what: str, args: list[str], default) -> list:
        """The config `--config=FILE[:ARG]` (or `--config FILE`) names, else `default`."""
        for i, arg in enumerate(args):
            value = None
            if arg.startswith("--config="):
                value = arg.split("=", 1)[1]
            elif arg == "--config" and i + 1 < len(args):
                value = args[i + 1]
            if value is None:
                continue
            if is_placeholder(value) or value.startswith("/"):
                return [(f"the config {value}", base_config())]
            path, _, config_arg = value.partition(":")
            if "../" in value:
                self.report(line, what, f"{value!r} points outside the repository")
                return default
            if not (ROOT / path).is_file():
                self.report(line, what, f"--config file {path!r} does not exist")
                return default
            try:
                return [(path, load_config(path, config_arg or None))]
            except Exception as e:  # noqa: BLE001 - a config that does not load is the finding
                self.report(line, what, f"{path}: get_config({config_arg!r}) fails: {e!r}")
                return default
        return default

    def flags(self, line: int, what: str, args: list[str], module: str, program: str) -> None:
        """A coop_jax program's flags, overrides and paths."""
        if module_file(module) is None:
            self.report(line, what, f"no module {module!r} in the repository")
            return
        configs = self.config_of(line, what, args, default_config_of(module))
        rest = self.arguments(line, what, args, program, program_flags(module), configs)
        if rest is not None and module == "coop_jax.launch.local":  # the command after "--"
            if _program(rest) is None:
                self.report(line, what, f"no command after '--': {rest}")
            else:
                self.command(line, rest)

    def arguments(self, line: int, what: str, args: list[str], program: str, known, configs
                  ) -> list[str] | None:
        """Check a program's arguments up to a "--"; return the words after it (None: none)."""
        known = known | HELP_FLAGS
        for i, arg in enumerate(args):
            if arg == "--":
                return args[i + 1:]
            if arg.startswith("--override="):  # real_model's --override=--config.x=y
                arg = arg.split("=", 1)[1]
            if arg.startswith("--config."):
                self.override(line, arg, configs)
            elif re.fullmatch(r"--?[A-Za-z?][\w-]*(=.*)?", arg):
                name, _, value = arg.lstrip("-").partition("=")
                if name not in known and name.removeprefix("no").lstrip("-") not in known:
                    self.report(line, what, f"{program} has no flag --{name}")
                if name in OUTPUT_FLAGS:
                    if not value and i + 1 < len(args):
                        args[i + 1] = "<output>"  # the next word is the folder it writes
                elif value:
                    self.value(line, what, value, check_exists=name != "config")  # config_of
            else:
                self.value(line, what, arg)
        return None

    def value(self, line: int, what: str, value: str, check_exists: bool = True) -> None:
        if is_placeholder(value):
            return
        if "../" in value or value == "..":
            self.report(line, what, f"{value!r} points outside the repository (a clone has no "
                                    "such folder)")
        elif check_exists and is_repo_path(value):
            problem = path_problem(value)
            if problem:
                self.report(line, what, problem)

    def python(self, line: int, what: str, args: list[str]) -> None:
        if args[:1] == ["-m"] and len(args) > 1:
            module = args[1]
            if module.startswith("coop_jax"):
                self.flags(line, what, args[2:], module, f"python -m {module}")
            else:  # pytest, pip, ...: only the paths
                for arg in args[2:]:
                    self.value(line, what, arg)
        elif args and args[0].endswith(".py"):
            script = ROOT / args[0]
            if not script.is_file():
                self.report(line, what, f"{args[0]!r} does not exist")
                return
            configs = self.config_of(line, what, args[1:], [("base_config()", base_config())])
            self.arguments(line, what, args[1:], args[0], defined_flags(script), configs)

    def launch(self, line: int, what: str, program: str, args: list[str]) -> None:
        words = [program] + args
        script_at = next((i for i, w in enumerate(words) if w.endswith(".sh")), None)
        if script_at is None:
            return self.report(line, what, "no launcher script in the command")
        script, args = words[script_at], words[script_at + 1:]
        if not (ROOT / script).is_file():
            return self.report(line, what, f"{script!r} does not exist")
        if script not in LAUNCHERS:
            return
        spec = launcher(script)
        extra = []
        if "--" in args:
            extra = args[args.index("--") + 1:]
            args = args[:args.index("--")]
        for arg in args:
            name, eq, value = arg.lstrip("-").partition("=")
            if is_placeholder(arg):  # "[<options>]"
                continue
            if not arg.startswith("-") or name not in spec.flags:
                self.report(line, what, f"{script} does not take {arg!r}")
                continue
            if is_placeholder(value):
                continue
            for flag, op, pattern in spec.rules:
                if flag != name:
                    continue
                ok = (re.fullmatch(pattern, value) if op == "=~"
                      else fnmatch.fnmatchcase(value, pattern))
                if not ok:
                    self.report(line, what, f"{script} refuses --{name}={value} (its check: "
                                            f"{op} {pattern})")
            if value and name not in OUTPUT_FLAGS | {"config"}:  # config: config_of below
                self.value(line, what, value)
        configs = self.config_of(line, what, args, [("base_config()", base_config())])
        for arg in extra:  # appended to coop-train
            if arg.startswith("--config."):
                self.override(line, arg, configs)
            else:
                self.value(line, what, arg)


def _split_commands(tokens: list[str]) -> list[list[str]]:
    parts, current = [], []
    for token in tokens:
        if token in ("&&", "||", ";"):
            parts.append(current)
            current = []
        else:
            current.append(token)
    return parts + [current]


def _program(tokens: list[str]) -> int | None:
    """Index of the program word of a command line (after `VAR=value` and a `$ ` / `!` prompt),
    or None when the words are not a command."""
    i = 0
    while i < len(tokens) and (tokens[i] in ("$", "!") or re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*",
                                                                       tokens[i])):
        i += 1
    if i >= len(tokens):
        return None
    word = tokens[i].lstrip("!")
    tokens[i] = word
    scripts, _ = setup_facts()
    if word in scripts or word in ("make", "pip", "pip3"):
        return i
    if word in PYTHONS and len(tokens) > i + 1 and (
            tokens[i + 1].endswith(".py") or (tokens[i + 1] == "-m" and len(tokens) > i + 2)):
        return i
    if (word.startswith("launch/") and word.endswith(".sh")) or (
            word in ("bash", "sbatch") and any(t.startswith("launch/") for t in tokens[i + 1:])):
        return i
    return None


# ------------------------------------------------------------------------------ the sources
def check_markdown(name: str, text: str) -> list[str]:
    checker = Checker(name, [("coop_jax.config.base_config()", base_config())])
    for s in markdown_snippets(text):
        checker.snippet(s)
        for m in re.finditer(r"\$\(([^()]+)\)", s.text):  # GGUF=$(python -m coop_jax.hf smollm2)
            checker.snippet(Snippet(s.line, m.group(1), True))
    return checker.problems


def check_config_docstring(path: str, text: str | None = None) -> list[str]:
    """Problems of a config file's docstring (`text`: another docstring, checked against the
    file's config)."""
    text, first = docstring_of(path) if text is None else (text, 1)
    checker = Checker(f"{path} (docstring)", [(path, load_config(path))])
    for s in plain_snippets(text, first):
        checker.snippet(s)
    # a `section.field=value` the docstring states in backticks is the value the file sets
    config = load_config(path)
    for s in plain_snippets(text, first):
        m = re.fullmatch(r"([a-z_]\w*(?:\.\w+)+)=(\S+)", s.text) if s.code else None
        if not m:
            continue
        try:
            actual = field_value(config, m.group(1))
        except KeyError:
            checker.report(s.line, s.text, f"no field {m.group(1)!r} in {path}")
            continue
        try:
            stated = ast.literal_eval(m.group(2))
        except (ValueError, SyntaxError):
            stated = m.group(2)
        if stated != actual:
            checker.report(s.line, s.text, f"the file sets {m.group(1)}={actual!r}")
    return checker.problems


def check_launcher_help(path: str, script: str | None = None) -> list[str]:
    """Problems of a launcher's help text (`script`: another version of the script's text)."""
    text, first = launcher_help(path, script)
    checker = Checker(f"{path} (help)", [("coop_jax.config.base_config()", base_config())])
    for s in plain_snippets(text, first):
        checker.snippet(s)
    return checker.problems


def _fail(problems: list[str]) -> None:
    assert not problems, "\n".join(["", *problems])


@pytest.mark.parametrize("name", USER_DOCS)
def test_doc_commands(name):
    _fail(check_markdown(name, (ROOT / name).read_text()))


@pytest.mark.parametrize("path", CONFIG_FILES)
def test_config_docstring_commands(path):
    _fail(check_config_docstring(path))


@pytest.mark.parametrize("path", LAUNCHERS)
def test_launcher_help_commands(path):
    _fail(check_launcher_help(path))


def heading_anchors(path: pathlib.Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    anchors = set()
    for title in re.findall(r"^#+\s+(.*?)\s*$", text, re.M):
        anchors.add(re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-"))
    return anchors


@pytest.mark.parametrize("name", USER_DOCS)
def test_doc_links(name):
    text = re.sub(r"```.*?```", "", (ROOT / name).read_text(), flags=re.S)
    problems = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        path = ((ROOT / name).parent / file).resolve() if file else ROOT / name
        if not path.exists():
            problems.append(f"{name}: link to {target!r}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in heading_anchors(path):
            problems.append(f"{name}: link to {target!r}: no such heading in {file or name}")
    _fail(problems)


@pytest.mark.parametrize("name", USER_DOCS)
def test_no_commit_hashes_or_issue_numbers(name):
    problems = []
    for number, line in enumerate((ROOT / name).read_text().split("\n"), 1):
        for m in re.finditer(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b", line):
            problems.append(f"{name}:{number}: {m.group(0)!r} looks like a commit hash")
        for m in re.finditer(r"\b[Ii]ssues? #?\d+|(?<![\w&])#\d+\b", line):
            problems.append(f"{name}:{number}: {m.group(0)!r} cites an issue")
    _fail(problems)


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail into docs/"


# ------------------------------------------------------------------------------ the checker itself
# Lines the docs once held; each must be caught (the first four are from the README and the TPU
# launcher's help before this test existed).
BAD = [
    ("TPU pod: `launch/tpu_pod.sh --project=P --zone=Z --name=N --accelerator-type=v4-32\n"
     "  --config=configs/qwen2_5_1_5b_gsm8k.py --workdir=gs://bucket/run [--dry-run]`",
     "refuses --name=N"),
    ("```bash\ncoop-train --config=configs/smollm2_gsm8k.py --workdir=runs/smollm2 \\\n"
     "  --config.data.data_dir=../shared/data/gsm8k\n```", "outside the repository"),
    ("```bash\ncoop-eval --hf=\"$GGUF\" --chat --dataset=gsm8k --data_dir=../shared/data\n```",
     "outside the repository"),
    ("Anything after \"--\" is appended (e.g. `--config.rl.num_steps=100`).",
     "no field 'rl.num_steps'"),
    ("`coop-train --config=configs/default.py --workdir=w --config.train.steps=ten`",
     "is not a valid int"),
    ("`coop-train --config=configs/default.py --workdir=w --config.rl.dynamic_sampling=maybe`",
     "is not a valid bool"),
    ("`coop-train --config=configs/default.py --workdir=w --config.mesh.shape=(1,x,1)`",
     "is not a valid tuple"),
    ("`coop-train --config=configs/nope.py --workdir=w`", "does not exist"),
    ("`coop-train-rm --init_hf=/models/x`", "has no flag --init_hf"),
    ("`make demos`", "no target 'demos'"),
    ("`python -m coop_jax.nothing.here --x=1`", "no module"),
    ("`python benchmarks/nothing.py`", "does not exist"),
    ("`sbatch --nodes=2 launch/gpu_slurm.sh --config=configs/default.py --workdir=/w --bogus`",
     "does not take '--bogus'"),
    ("`launch/tpu_pod.sh --project=p --zone=z --name=ok --config=configs/default.py "
     "--workdir=/local/run`", "refuses --workdir"),
    ("`launch/tpu_pod.sh --project=p --zone=z --name=ok --config=configs/default.py "
     "--workdir=gs://b/r -- --config.train.stepz=3`", "no field 'train.stepz'"),
    ("See `coop_jax/no_such_module.py`.", "does not exist"),
    ("`python -m coop_jax.launch.local --num_processes=2 -- coop-train "
     "--config=configs/default.py --workdir=w --config.nope=1`", "no field 'nope'"),
    ("`coop-rephrase --config.dataset=gsm8k --config.data_dirr=d`", "no field 'data_dirr'"),
    ("`pip install -e \".[tests]\"`", "no extra 'tests'"),
]
GOOD = [
    "`coop-train --config=configs/default.py --workdir=runs/demo --config.rl.clip_eps_high=0.28`",
    "```bash\ncoop-train --config=configs/corewarding_gsm8k.py:2 --workdir=runs/c \\\n"
    "  --config.model.hf_path=<model> --config.data.data_dir=<folder>\n```",
    "`launch/tpu_pod.sh --project=p --zone=z --name=coop-v4 --config=configs/default.py "
    "--workdir=gs://b/r -- --config.train.steps=100 --config.mesh.shape=\"(1,8,1)\"`",
    "`python -m coop_jax.projects.reward_hacking --config=configs/toy_hacking.py "
    "--workdir=runs/h --config.experiment.seeds=0`",
    "`make demo WORKDIR=runs/x`",
]


@pytest.mark.parametrize("text,expected", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_checker_catches(text, expected):
    problems = check_markdown("example.md", text)
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("text", GOOD, ids=[f"good{i}" for i in range(len(GOOD))])
def test_checker_accepts(text):
    assert check_markdown("example.md", text) == []


def test_config_docstring_values_are_the_files():
    stated = "RM warm-up: `cooper.warmup_ratio=0.01`, policy `optim.learning_rate=1e-6`."
    problems = check_config_docstring("configs/qwen2_5_1_5b_gsm8k.py", stated)
    assert len(problems) == 1 and "the file sets cooper.warmup_ratio=0.0" in problems[0], problems


def test_launcher_help_example_is_checked():
    script = (ROOT / "launch" / "tpu_pod.sh").read_text().replace(
        "--config.train.steps=100", "--config.rl.num_steps=100")
    problems = check_launcher_help("launch/tpu_pod.sh", script)
    assert problems and all("no field 'rl.num_steps'" in p for p in problems), problems
