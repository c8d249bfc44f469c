"""Labels/s of the coop_jax rule verifier vs math-verify on the GSM8K test set.

Items: for each of the 1,319 GSM8K test problems, the reference is the final answer after
``####`` and there are two completions: the reference solution itself (correct) and the
same solution with the final answer increased by one (incorrect) -- 2,638 labels.

    python benchmarks/verifier_throughput.py [--workers 2] [--data ../shared/data]
        [--repeat N] [--skip-math-verify] [--gsm8k-only]

A second table does the same on MATH500 (each answer against its own solution and
against ``\\boxed{answer+1}``), where most items need the LaTeX parser. Rows: coop_jax
``RuleVerifier`` (process pool, workers already started), coop_jax in-process ``verify``
(one core), math-verify ``parse``+``verify`` in-process (one core) and math-verify in a
process pool of the same size. Accuracy is against the known labels. Last, a list of
near-miss pairs (``1/2004!`` vs ``1/2006!`` ...) and which of them each verifier accepts.
``--repeat N`` times each coop_jax row N times and reports the median (the GSM8K table takes
well under a second, so single timings are noisy); repeats after the first find the verifier's
parse caches warm, so compare runs made with the same N.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time
from pathlib import Path


def load_items(data_dir: Path) -> tuple[list[str], list[str], list[bool]]:
    refs, comps, labels = [], [], []
    for line in (data_dir / "gsm8k" / "test.jsonl").read_text().splitlines():
        row = json.loads(line)
        body, final = row["answer"].rsplit("####", 1)
        final = final.strip()
        wrong = str(int(final.replace(",", "")) + 1)
        refs += [final, final]
        comps += [row["answer"], body + "#### " + wrong]
        labels += [True, False]
    return refs, comps, labels


def _math_verify_one(pair: tuple[str, str]) -> bool:
    from math_verify import parse, verify
    ref, comp = pair
    try:
        return bool(verify(parse(ref), parse(comp)))
    except Exception:
        return False


# Pairs that are NOT equivalent; a verifier that accepts one has a false positive.
NEAR_MISSES = [
    (r"\frac{1}{2004!}", r"\frac{1}{2006!}"), (r"\frac{1}{2^{99}}", r"\frac{1}{2^{98}}"),
    (r"1-\frac{1}{e}", r"1+\frac{1}{e}"), (r"\pm 2021", "2021"), ("4", r"4\sqrt{2}"),
    (r"10^{-20}", "0"), (r"e^{-1000}", "0"), (r"\sqrt{2}", "1.414"), (r"\frac{1}{3}", "0.333"),
    ("(3,4]", "(3,4)"), ("[2,5)", "(2,5)"), (r"\pi", "3.14"), ("1000000", "1000001"),
    (r"x > 2", r"x \ge 2"), ("12:00", "1:00"), (r"2^{100}", r"2^{100}+1"),
    # answer forms of issue 14: thousands vs decimal comma, percent, labels, ratios, |x| chains
    ("12.5", "12,500"), ("12,500", "12.5"), ("1", r"100\%"), (r"0.5\%", "0.5"),
    ("(4,1)", "(a,b)=(1,4)"), ("4", "(a,b)=(4,1)"), ("5", "|x|=5"), ("2:3", "AB:CD=3:2"),
    (r"\frac{7}{32}", "32:7"), (r"[-2,-1] \cup [1,2]", r"1 < |z| \le 2"),
]


def near_miss_accepts() -> tuple[list[str], list[str]]:
    """Near-miss pairs wrongly accepted by (coop_jax, math-verify)."""
    from math_verify import parse, verify as mv_verify

    from coop_jax.verify import answers_equivalent
    coop, mv = [], []
    for a, b in NEAR_MISSES:
        if answers_equivalent(a, b):
            coop.append(f"{a} ~ {b}")
        if mv_verify(parse(f"${a}$"), parse(f"${b}$")):
            mv.append(f"{a} ~ {b}")
    return coop, mv


def _timed(fn, repeat: int = 1) -> tuple[list[bool], float, float]:
    """Output of ``fn`` and the medians of ``repeat`` wall times and of this process's CPU times
    (on a shared machine the CPU time of the in-process rows is the steadier number)."""
    times, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return out, sorted(times)[len(times) // 2], sorted(cpu)[len(cpu) // 2]


def load_math500(data_dir: Path) -> tuple[list[str], list[str], list[bool]]:
    """MATH500: each answer against its own solution (correct) and against ``answer+1``."""
    refs, comps, labels = [], [], []
    for line in (data_dir / "math500" / "test.jsonl").read_text().splitlines():
        row = json.loads(line)
        refs += [row["answer"], row["answer"]]
        comps += [row["solution"], f"So the answer is $\\boxed{{{row['answer']}+1}}$."]
        labels += [True, False]
    return refs, comps, labels


def run_all(refs: list[str], comps: list[str], workers: int, repeat: int = 1,
            math_verify: bool = True) -> tuple[list, float]:
    """(name, outputs, seconds, cpu seconds or None) per verifier, and the pool's start-up s."""
    from coop_jax.verify import RuleVerifier, verify
    pairs = list(zip(refs, comps))
    rows = []
    t0 = time.perf_counter()
    with RuleVerifier(num_workers=workers, timeout_s=5.0) as rv:
        rv.wait_ready()
        startup = time.perf_counter() - t0
        out, dt, _ = _timed(lambda: rv.verify_batch(refs, comps), repeat)
        rows.append((f"coop_jax RuleVerifier ({workers} workers)", out, dt, None))
    out, dt, cpu = _timed(lambda: [verify(r, c) for r, c in pairs], repeat)
    rows.append(("coop_jax verify, in-process (1 core)", out, dt, cpu))
    if not math_verify:
        return rows, startup
    _math_verify_one(("1", "1"))  # import and warm up outside the timing
    out, dt, cpu = _timed(lambda: [_math_verify_one(p) for p in pairs])
    rows.append(("math-verify parse+verify, in-process (1 core)", out, dt, cpu))
    with mp.get_context("spawn").Pool(workers) as pool:
        pool.map(_math_verify_one, [("1", "1")] * workers)
        out, dt, _ = _timed(lambda: pool.map(_math_verify_one, pairs, chunksize=16))
    rows.append((f"math-verify parse+verify, Pool({workers})", out, dt, None))
    return rows, startup


def print_table(title: str, rows: list, labels: list[bool]) -> None:
    n = len(labels)
    print(f"\n{title}: {n} labels ({sum(labels)} correct completions, {n - sum(labels)} wrong)")
    print(f"{'verifier':<48} {'labels/s':>10} {'seconds':>8} {'cpu s':>7} {'accuracy':>9}")
    for name, out, dt, cpu in rows:
        acc = sum(o == y for o, y in zip(out, labels)) / n
        cpu_s = "-" if cpu is None else f"{cpu:.2f}"
        print(f"{name:<48} {n / dt:>10.0f} {dt:>8.2f} {cpu_s:>7} {acc:>9.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--repeat", type=int, default=1, help="median of N timings (coop_jax rows)")
    ap.add_argument("--skip-math-verify", action="store_true", help="coop_jax rows only")
    ap.add_argument("--gsm8k-only", action="store_true", help="skip the MATH500 table")
    args = ap.parse_args()
    mv = not args.skip_math_verify
    refs, comps, labels = load_items(args.data)
    rows, startup = run_all(refs, comps, args.workers, args.repeat, mv)
    print_table("GSM8K test (reference = final answer, completion = solution)", rows, labels)
    if not args.gsm8k_only:
        refs, comps, labels = load_math500(args.data)
        rows, _ = run_all(refs, comps, args.workers, args.repeat, mv)
        print_table("MATH500 (answer vs solution, and vs answer+1)", rows, labels)
    print(f"(RuleVerifier start-up {startup:.1f}s, not included in the timings)")
    if mv:
        coop_fp, mv_fp = near_miss_accepts()
        print(f"\nnear misses wrongly accepted (of {len(NEAR_MISSES)}): coop_jax {len(coop_fp)} "
              f"{coop_fp}, math-verify {len(mv_fp)} {mv_fp}")


if __name__ == "__main__":
    main()
