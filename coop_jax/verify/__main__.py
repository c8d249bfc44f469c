"""Command line: label a JSONL file of (reference, completion) pairs.

    python -m coop_jax.verify --in IN.jsonl --out OUT.jsonl [--workers N] [--timeout S]
                              [--extraction lenient|strict_boxed|strict_hash]

Each input line is a JSON object with ``reference`` (string; an int/float is accepted
and turned into its decimal string) and ``completion`` (string). Each output line is
the input object plus ``correct`` (bool) and ``extracted`` (the answer found, or null).
Blank lines are ignored. A malformed line stops the run before any work with an error
naming the line number and field (exit code 2), unless ``--skip-invalid`` is given, in
which case such lines are left out of the output and counted in the summary.
A summary (count, correct, timeouts, labels/s) is printed to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from coop_jax.jsonl import JsonlError, iter_jsonl
from coop_jax.verify.pool import RuleVerifier
from coop_jax.verify.strict import EXTRACTION_MODES


def _check_item(source: str, line_no: int, obj: dict) -> dict:
    """The row with an int/float ``reference`` turned into a string; JsonlError naming the field."""
    for field in ("reference", "completion"):
        if field not in obj:
            raise JsonlError(source, line_no, f"missing field '{field}'")
    ref = obj["reference"]
    if isinstance(ref, (int, float)) and not isinstance(ref, bool):
        obj["reference"] = str(ref)
    elif not isinstance(ref, str):
        raise JsonlError(source, line_no, "field 'reference' must be a string",
                         f"got {type(ref).__name__}")
    if not isinstance(obj["completion"], str):
        raise JsonlError(source, line_no, "field 'completion' must be a string",
                         f"got {type(obj['completion']).__name__}")
    return obj


def read_items(path: str, skip_invalid: bool) -> tuple[list[dict], list[JsonlError]]:
    """Valid items of a JSONL file ('-' for stdin) and the errors of the skipped lines."""
    items: list[dict] = []
    skipped: list[JsonlError] = []
    source = "<stdin>" if path == "-" else path
    rows = iter_jsonl(sys.stdin if path == "-" else path,
                      on_invalid=skipped.append if skip_invalid else None)
    for line_no, obj in rows:
        try:
            items.append(_check_item(source, line_no, obj))
        except JsonlError as exc:
            if not skip_invalid:
                raise
            skipped.append(exc)
    return items, skipped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m coop_jax.verify", description=__doc__.split("\n")[0])
    ap.add_argument("--in", dest="inp", required=True, help="input JSONL ('-' for stdin)")
    ap.add_argument("--out", required=True, help="output JSONL ('-' for stdout)")
    ap.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--timeout", type=float, default=5.0, help="seconds per item (default 5)")
    ap.add_argument("--memory-mb", type=int, default=2048, help="extra address space per worker")
    ap.add_argument("--extraction", default="lenient", choices=EXTRACTION_MODES,
                    help="answer matching (default lenient; strict_boxed / strict_hash follow "
                         "Co-rewarding / Cooper's GSM8K reward)")
    ap.add_argument("--skip-invalid", action="store_true",
                    help="skip malformed lines (counted) instead of stopping")
    args = ap.parse_args(argv)
    if args.workers < 1 or args.timeout <= 0:
        ap.error("--workers must be >= 1 and --timeout > 0")
    try:
        items, skipped = read_items(args.inp, args.skip_invalid)
    except JsonlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot read {args.inp}: {exc}", file=sys.stderr)
        return 2
    t_start = time.monotonic()
    with RuleVerifier(num_workers=args.workers, timeout_s=args.timeout,
                      memory_limit_mb=args.memory_mb, extraction=args.extraction) as verifier:
        verifier.wait_ready()
        t0 = time.monotonic()
        results = verifier.verify_batch_detailed([o["reference"] for o in items],
                                                 [o["completion"] for o in items])
        elapsed = time.monotonic() - t0
        stats = verifier.stats
    out = sys.stdout if args.out == "-" else open(args.out, "w", encoding="utf-8")
    try:
        for obj, res in zip(items, results):
            obj["correct"] = res.correct
            obj["extracted"] = res.extracted
            out.write(json.dumps(obj, ensure_ascii=False) + "\n")
    finally:
        if out is not sys.stdout:
            out.close()
    n = len(items)
    n_ok = sum(r.correct for r in results)
    rate = n / elapsed if elapsed > 0 else float("inf")
    pct = 100.0 * n_ok / n if n else 0.0
    print(f"verified {n} items: {n_ok} correct ({pct:.1f}%), {stats.timeouts} timeouts, "
          f"{stats.crashes} crashes, {stats.errors} errors, {len(skipped)} skipped lines, "
          f"{stats.worker_restarts} worker restarts; {rate:.0f} labels/s "
          f"(+{t0 - t_start:.1f}s worker start-up)", file=sys.stderr)
    for exc in skipped[:10]:
        print(f"skipped: line {exc.line_no}: {exc.describe()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
