"""Rule verifier: Cooper's high-precision label source for math answers.

Public API::

    verify(reference, completion, extraction="lenient") -> bool
    verify_detailed(reference, completion, extraction="lenient")
        -> VerifyResult(correct, extracted, timed_out, error)
    extract_answer(text, mode="lenient") -> str | None
    answers_equivalent(a, b) -> bool
    RuleVerifier(num_workers=2, timeout_s=5.0, extraction="lenient")
        .verify_batch(references, completions) -> list[bool]

``extraction``/``mode`` is one of ``EXTRACTION_MODES``: ``"lenient"`` (coop_jax's policy),
``"strict_boxed"`` (Co-rewarding: last ``\\boxed{}`` content, exact string) or
``"strict_hash"`` (Cooper's GSM8K reward: last ``#### <number>``, exact string) or
``"strict_numeric"`` (the synthetic task's gold: an integer literal after the last ``####`` or
in the last ``\\boxed{}``, compared as an integer).

The single-item functions run in-process (cost guards, no hard timeout); training uses
:class:`RuleVerifier`, a process pool with hard per-item timeouts and a memory cap.
"""

from coop_jax.verify.equivalence import (VerifyResult, answers_equivalent, verify,
                                         verify_detailed)
from coop_jax.verify.extract import extract_answer, reference_answer
from coop_jax.verify.pool import RuleVerifier, VerifierStats
from coop_jax.verify.strict import EXTRACTION_MODES

__all__ = [
    "EXTRACTION_MODES", "RuleVerifier", "VerifierStats", "VerifyResult", "answers_equivalent",
    "extract_answer", "reference_answer", "verify", "verify_detailed",
]
