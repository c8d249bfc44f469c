"""Rule-verify completions grouped per problem (evaluation, RM triples)."""
from __future__ import annotations

from typing import Sequence

from coop_jax.verify.equivalence import VerifyResult, verify_detailed


def verify_grouped(verifier, references: Sequence[str], completions: Sequence[Sequence[str]]
                   ) -> list[list[VerifyResult]]:
    """VerifyResults shaped like ``completions`` (one list per problem).

    ``verifier`` is anything with ``verify_batch_detailed`` (a ``RuleVerifier``), or None for the
    in-process verifier (no hard timeout).
    """
    if len(references) != len(completions):
        raise ValueError(f"{len(references)} references but {len(completions)} completion groups")
    flat_refs = [r for r, group in zip(references, completions) for _ in group]
    flat = [c for group in completions for c in group]
    if verifier is None:
        results = [verify_detailed(r, c) for r, c in zip(flat_refs, flat)]
    else:
        results = verifier.verify_batch_detailed(flat_refs, flat)
    out, pos = [], 0
    for group in completions:
        out.append(results[pos:pos + len(group)])
        pos += len(group)
    return out


def verify_across_hosts(verifier, references: Sequence[str],
                        completions: Sequence[Sequence[str]]) -> list[list[VerifyResult]]:
    """`verify_grouped` with the problems split over the processes of a multi-host job: each
    host's verifier pool checks its contiguous share, and every host gets all the verdicts."""
    import jax  # only the training / evaluation process has it

    hosts = jax.process_count()
    if hosts == 1:
        return verify_grouped(verifier, references, completions)
    from coop_jax.parallel import host
    n = len(completions)
    block = host.row_block(-(-n // hosts))
    mine = slice(min(n, block.start), min(n, block.stop))
    verdicts = [[[r.correct, r.extracted, r.timed_out, r.error] for r in group]
                for group in verify_grouped(verifier, references[mine], completions[mine])]
    return [[VerifyResult(*v) for v in group]
            for part in host.gather_json(verdicts) for group in part]
