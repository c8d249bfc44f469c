"""coop-rephrase: a JSON-lines copy of a GSM8K / MATH split with a `rephrased` field, the second
view of each question that Co-rewarding-I trains on.

    coop-rephrase --config.dataset=gsm8k --config.data_dir=DATA --config.split=train \
        --config.out_dir=OUT (--config.hf_path=LOCAL_HF_DIR | --config.url=http://host:8000/v1 \
        --config.model=NAME) [--config.num_examples=N --config.batch_size=32 ...]

The paraphrase comes from a local HF causal LM sampled with coop_jax, or from an OpenAI-compatible
chat endpoint (Co-rewarding's rewrite_questions.py samples Qwen3-32B at T=0.7, top-p 0.8; those are
the defaults). A rephrasing is kept only if it is non-empty, differs from the original, and
states no answer (`####`, `\\boxed`, "the answer is"); rejected rows are left out of the copy, as
the reference drops the questions it failed to rewrite. Writes into OUT:
  <split>.jsonl           the kept rows: every field of the input row, plus `id` and `rephrased`;
  <split>.rejected.jsonl  one line per rejected row: id, reason, reply;
  <split>.rephrase.json   the summary (kept fraction, counts by reason, time);
and links the dataset's other split files into OUT, so `data.data_dir=OUT` serves a whole run.
Resumable: rows are appended as they finish, and a rerun skips every row already kept or rejected,
except rows that got no reply (endpoint error, or stopped at max_new_tokens), which it retries.
"""
from __future__ import annotations

import json
import logging
import os
import re
import time
from typing import Any, Callable

import ml_collections
from absl.app import UsageError

from coop_jax.data import sources
from coop_jax.sampling.chat import http_chat, local_chat

log = logging.getLogger("coop_jax.rephrase")

REPHRASE_SYSTEM_PROMPT = (
    "You rewrite math word problems. Given a problem, write a new version of it with different "
    "wording and a different everyday setting that keeps every number, every relationship between "
    "the quantities and the quantity asked for, so that it has exactly the same answer. The new "
    "problem must be self-contained, natural and solvable. Do not solve it and do not state the "
    "answer: reply with the rewritten problem only.")

REASONS = ("empty", "unchanged", "contains_answer", "no_reply")
RETRIED = ("no_reply",)
_LABEL = re.compile(r"^\s*(?:\*\*)?\s*(?:rewritten|rephrased|new|paraphrased)?\s*"
                    r"(?:problem|question)\s*:\s*(?:\*\*)?\s*", re.IGNORECASE)
_ANSWER = re.compile(r"####|\\boxed|\\fbox|\bthe (?:final )?answer is\b", re.IGNORECASE)


def get_config() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(dict(
        dataset="gsm8k", data_dir="", split="train", out_dir="", num_examples=0,
        hf_path="", url="", model="", timeout_s=120.0,
        temperature=0.7, top_p=0.8, max_new_tokens=384, max_prompt_len=512, batch_size=32,
        seed=0, keep_truncated=False))


def rephrase_messages(question: str) -> list[dict]:
    return [{"role": "system", "content": REPHRASE_SYSTEM_PROMPT},
            {"role": "user", "content": f"Problem:\n{question.strip()}\n\nRewritten problem:"}]


def clean_reply(reply: str) -> str:
    """The reply without surrounding whitespace, a leading "Rewritten problem:" label or quotes."""
    text = _LABEL.sub("", reply.strip(), count=1).strip()
    if len(text) > 1 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1].strip()
    return text


def _canonical(text: str) -> str:
    return " ".join(text.split()).casefold()


def judge(question: str, reply: str | None) -> tuple[str | None, str | None]:
    """(kept rephrasing, None) or (None, rejection reason in REASONS)."""
    if reply is None:
        return None, "no_reply"
    text = clean_reply(reply)
    if not text:
        return None, "empty"
    if _canonical(text) == _canonical(question):
        return None, "unchanged"
    if _ANSWER.search(text):
        return None, "contains_answer"
    return text, None


# ---------------------------------------------------------------------- generation backends
def make_backend(c: ml_collections.ConfigDict) -> Callable[[list[str]], list[str | None]]:
    """questions -> one raw reply per question (None: no usable reply)."""
    drop_truncated = not c.keep_truncated
    if c.url:
        chat = http_chat(c.url, c.model or "default", c.temperature, c.timeout_s, c.top_p,
                         drop_truncated=drop_truncated)
        return lambda qs: chat([(rephrase_messages(q), c.max_new_tokens) for q in qs])
    chat = local_chat(c.hf_path, c.max_prompt_len, c.max_new_tokens, c.temperature, c.seed,
                      c.top_p, drop_truncated=drop_truncated)

    def generate(questions: list[str]) -> list[str | None]:
        conversations = [rephrase_messages(q) for q in questions]
        # A short last batch is padded so that every call reuses the one compiled shape.
        padded = conversations + [conversations[-1]] * (c.batch_size - len(conversations))
        return chat(padded)[:len(conversations)]

    return generate


# ---------------------------------------------------------------------- resumable output files
def _read_done(path: str) -> list[dict]:
    """Rows of an append-only JSON-lines file; a torn last line (a crash mid-write) is cut off."""
    if not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        raw = f.read()
    end = raw.rfind(b"\n") + 1
    if end < len(raw):
        log.warning("%s: dropping a torn last line (%d bytes) left by an interrupted run", path,
                    len(raw) - end)
        with open(path, "r+b") as f:
            f.truncate(end)
    return [json.loads(line) for line in raw[:end].decode("utf-8").splitlines() if line.strip()]


def output_paths(out_dir: str, split: str) -> dict[str, str]:
    return {name: os.path.join(out_dir, f"{split}{suffix}") for name, suffix in
            (("kept", ".jsonl"), ("rejected", ".rejected.jsonl"), ("summary", ".rephrase.json"))}


def _link_other_splits(dataset: str, split: str, data_dir: str, out_dir: str) -> None:
    for other in sources.FILE_SPLITS[dataset]:
        target = os.path.join(out_dir, f"{other}.jsonl")
        if other == split or os.path.lexists(target):
            continue
        try:
            source = sources.resolve_split_file(dataset, other, data_dir)
        except FileNotFoundError:
            continue
        os.symlink(os.path.abspath(source), target)


def _summary(targets: list[str], kept_rows: list[dict], rejected_rows: list[dict]) -> dict:
    wanted = set(targets)
    kept = {r["id"] for r in kept_rows} & wanted
    last_reason = {r["id"]: r["reason"] for r in rejected_rows if r["id"] in wanted}
    rejected = {reason: 0 for reason in REASONS}
    for rid, reason in last_reason.items():
        if rid not in kept:
            rejected[reason] += 1
    pending = len(wanted) - len(kept) - sum(rejected.values())
    return {"rows": len(wanted), "kept": len(kept), "rejected": rejected,
            "not_attempted": pending, "kept_fraction": len(kept) / max(len(wanted), 1)}


def rephrase_split(c: ml_collections.ConfigDict,
                   backend: Callable[[list[str]], list[str | None]] | None = None) -> dict:
    """Rephrase the split's rows not yet done (see the module doc); returns the summary."""
    import tqdm

    path, pairs, _ = sources.read_split_rows(c.dataset, c.split, c.data_dir)
    if c.num_examples:
        pairs = pairs[:c.num_examples]
    paths = output_paths(c.out_dir, c.split)
    if os.path.abspath(paths["kept"]) == os.path.abspath(path):
        raise UsageError(f"config.out_dir {c.out_dir!r} holds the input file {path}; choose "
                         "another folder")
    os.makedirs(c.out_dir, exist_ok=True)
    _link_other_splits(c.dataset, c.split, c.data_dir, c.out_dir)
    kept_rows, rejected_rows = _read_done(paths["kept"]), _read_done(paths["rejected"])
    done = {r["id"] for r in kept_rows} | {r["id"] for r in rejected_rows
                                           if r["reason"] not in RETRIED}
    todo = [(row, rec) for row, rec in pairs if rec["id"] not in done]
    log.info("%s: %d rows, %d already done, %d to rephrase", path, len(pairs),
             len(pairs) - len(todo), len(todo))
    backend = backend or make_backend(c)
    start, run = time.perf_counter(), {"attempted": 0, "kept": 0}
    with open(paths["kept"], "a", encoding="utf-8") as kept_f, \
            open(paths["rejected"], "a", encoding="utf-8") as rejected_f:
        for at in tqdm.trange(0, len(todo), c.batch_size, desc="coop-rephrase"):
            batch = todo[at:at + c.batch_size]
            replies = backend([rec["question"] for _, rec in batch])
            for (row, rec), reply in zip(batch, replies, strict=True):
                text, reason = judge(rec["question"], reply)
                if reason is None:
                    out = dict(row, id=rec["id"], rephrased=text)
                    kept_f.write(json.dumps(out, ensure_ascii=False) + "\n")
                    kept_rows.append(out)
                    run["kept"] += 1
                else:
                    out = {"id": rec["id"], "reason": reason, "reply": reply}
                    rejected_f.write(json.dumps(out, ensure_ascii=False) + "\n")
                    rejected_rows.append(out)
            kept_f.flush()
            rejected_f.flush()
            run["attempted"] += len(batch)
    run["seconds"] = time.perf_counter() - start
    summary = _summary([rec["id"] for _, rec in pairs], kept_rows, rejected_rows)
    summary |= {"input": path, "output": paths["kept"], "this_run": run,
                "backend": c.url or c.hf_path}
    with open(paths["summary"], "w") as f:
        json.dump(summary, f, indent=2)
    return summary


# ---------------------------------------------------------------------- the console script
FIELD_DOCS = {  # one line per get_config() field: --help and --print_config show them
    "dataset": "the dataset of the input split (gsm8k | math500 | math)",
    "data_dir": "folder with <split>.jsonl or <dataset>/<split>.jsonl",
    "split": "the split to rephrase",
    "out_dir": "output folder (not the input's): <split>.jsonl, .rejected.jsonl, .rephrase.json",
    "num_examples": "first N rows (0: all)",
    "hf_path": "local HF causal LM (folder or .gguf) that rephrases, sampled with coop_jax",
    "url": "or an OpenAI-compatible endpoint (http://host:8000/v1)",
    "model": "the endpoint's model name",
    "timeout_s": "seconds one endpoint request may take",
    "temperature": "sampling temperature (the reference's)",
    "top_p": "nucleus sampling threshold (the reference's)",
    "max_new_tokens": "reply tokens (a reply cut at this length is retried on a rerun)",
    "max_prompt_len": "hf_path: prompt tokens",
    "batch_size": "questions per call",
    "seed": "hf_path: sampling seed",
    "keep_truncated": "keep a reply cut at max_new_tokens instead of retrying it",
}


def define_flags(fv, argv: list[str]) -> None:
    from ml_collections import config_flags

    from coop_jax.console import define_print_config

    config_flags.DEFINE_config_dict("config", get_config(), "coop-rephrase settings",
                                    flag_values=fv, sys_argv=argv)
    define_print_config(fv)


def validate(c: ml_collections.ConfigDict) -> None:
    """UsageError naming the first impossible field."""
    if c.dataset not in sources.FILE_SPLITS:
        raise UsageError(f"config.dataset must be one of {list(sources.FILE_SPLITS)}, got "
                         f"{c.dataset!r}")
    for field in ("data_dir", "out_dir"):
        if not c[field]:
            raise UsageError(f"config.{field} is required")
    if bool(c.hf_path) == bool(c.url):
        raise UsageError("give exactly one of config.hf_path (a local HF model) and config.url "
                         "(an OpenAI-compatible endpoint)")
    for field in ("batch_size", "max_new_tokens", "max_prompt_len"):
        if c[field] < 1:
            raise UsageError(f"config.{field} must be >= 1, got {c[field]}")
    if c.num_examples < 0:
        raise UsageError(f"config.num_examples must be >= 0 (0 = all), got {c.num_examples}")
    if c.temperature < 0 or not 0 < c.top_p <= 1:
        raise UsageError(f"config.temperature must be >= 0 and config.top_p in (0, 1], got "
                         f"{c.temperature} and {c.top_p}")
    from coop_jax.hf.sources import check_model_path

    sources.check_data_files("config.data_dir", c.dataset, c.data_dir, {"config.split": c.split})
    check_model_path("config.hf_path", c.hf_path)


def main(argv: list[str]) -> dict[str, Any]:
    """Parse `argv` (argv[0] is the program name), rephrase, print and return the summary
    (`--print_config`: print the settings, return {})."""
    from coop_jax.console import parse_flags, print_config

    fv = parse_flags(define_flags, argv, __doc__, FIELD_DOCS)
    c = fv.config
    if fv.print_config:
        print_config(c, get_config(), lambda path: FIELD_DOCS.get(path, ""))
        return {}
    validate(c)
    summary = rephrase_split(c)
    rejected = ", ".join(f"{k} {v}" for k, v in summary["rejected"].items() if v) or "none"
    print(f"kept {summary['kept']} of {summary['rows']} rows ({summary['kept_fraction']:.1%}); "
          f"rejected: {rejected}; this run: {summary['this_run']['attempted']} rows in "
          f"{summary['this_run']['seconds']:.1f}s -> {summary['output']}")
    if summary["rejected"]["no_reply"]:
        print(f"{summary['rejected']['no_reply']} rows got no reply; run again to retry them")
    return summary


def run() -> None:
    """Console entry point (`coop-rephrase`)."""
    from coop_jax.console import run_console
    run_console(main, "coop-rephrase")


if __name__ == "__main__":
    run()
