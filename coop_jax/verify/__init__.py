"""Rule verifier: Cooper's high-precision label source for math answers.

Public API::

    verify(reference, completion) -> bool
    verify_detailed(reference, completion) -> VerifyResult(correct, extracted, timed_out, error)
    extract_answer(text) -> str | None
    answers_equivalent(a, b) -> bool
    RuleVerifier(num_workers=2, timeout_s=5.0).verify_batch(references, completions) -> list[bool]

The single-item functions run in-process (cost guards, no hard timeout); training uses
:class:`RuleVerifier`, a process pool with hard per-item timeouts and a memory cap.
"""

from coop_jax.verify.equivalence import (VerifyResult, answers_equivalent, verify,
                                         verify_detailed)
from coop_jax.verify.extract import extract_answer, reference_answer
from coop_jax.verify.pool import RuleVerifier, VerifierStats

__all__ = [
    "RuleVerifier", "VerifierStats", "VerifyResult", "answers_equivalent", "extract_answer",
    "reference_answer", "verify", "verify_detailed",
]
