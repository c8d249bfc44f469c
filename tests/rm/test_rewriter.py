"""The local "rewrite" assistant sharded on the mesh (`cooper.local_rewriter` /
`sampling.chat.local_chat` with a mesh) and `build_pairs`' rewriter calls when the rewriter is a
collective (a sharded assistant on several processes)."""
import json
import sys
import textwrap
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding

from conftest import save_tiny_hf_causal_lm

from coop_jax import config as config_lib, hf, parallel
from coop_jax.rm import cooper
from coop_jax.launch.local import launch

ITEMS = [("3+4", "3+4=7. #### 7"), ("5+5", "5+5=10. #### 10"), ("1+2", "1+2=3. #### 3"),
         ("2+9", "2+9=11. #### 11"), ("6+1", "6+1=7. #### 7"), ("8+8", "8+8=16. #### 16")]


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    return save_tiny_hf_causal_lm(tmp_path_factory.mktemp("assistant"),
                                  max_position_embeddings=256)


@pytest.fixture
def loaded(monkeypatch):
    """Every model `hf.load` returns from now on (the rewriter's assistant)."""
    models = []
    real = hf.load

    def load(*args, **kwargs):
        models.append(real(*args, **kwargs))
        return models[-1]

    monkeypatch.setattr(hf, "load", load)
    return models


def _mesh(shape):
    return parallel.make_mesh(shape, jax.devices()[:int(np.prod(shape))])


@pytest.mark.parametrize("shape", [(2, 2, 1), (1, 2, 2)])
def test_sharded_rewriter_places_its_params_on_the_mesh_in_the_dtype(tiny_lm, loaded, shape):
    mesh = _mesh(shape)
    rewrite = cooper.local_rewriter(tiny_lm, 48, 6, mesh=mesh, dtype="bfloat16")
    (lm,) = loaded
    assert lm.config.param_dtype == "bfloat16" and lm.config.dtype == "bfloat16"
    want = parallel.param_shardings(lm.config, mesh)
    for leaf, sharding in zip(jax.tree_util.tree_leaves(lm.params),
                              jax.tree_util.tree_leaves(want)):
        assert leaf.dtype == jnp.bfloat16
        assert isinstance(leaf.sharding, NamedSharding) and leaf.sharding.mesh == mesh
        assert leaf.sharding.is_equivalent_to(sharding, leaf.ndim)
    assert not rewrite.collective  # one process: nothing to agree on
    out = rewrite(ITEMS[:3])
    assert len(out) == 3 and all(isinstance(t, str) for t in out)
    assert rewrite([]) == []


def test_sharded_rewriter_gives_the_unsharded_replies(tiny_lm):
    """float32: the same replies with and without a mesh, padded to a fixed batch or not (the
    sampler's random bits of a row do not depend on the batch size or the sharding)."""
    plain = cooper.local_rewriter(tiny_lm, 48, 12)
    want = [plain(ITEMS[:3]), plain(ITEMS[:2])]
    for batch_size in (0, 8):
        sharded = cooper.local_rewriter(tiny_lm, 48, 12, mesh=_mesh((2, 2, 1)),
                                        batch_size=batch_size)
        assert [sharded(ITEMS[:3]), sharded(ITEMS[:2])] == want
    # more requests than one fixed batch holds: several calls, one reply per request in order
    chunked = cooper.local_rewriter(tiny_lm, 48, 12, mesh=_mesh((2, 2, 1)), batch_size=4)
    assert chunked(ITEMS[:3]) == want[0]
    assert len(chunked(ITEMS)) == len(ITEMS)


def test_the_continuous_engine_rewrites_as_the_static_sampler_greedy(tiny_lm):
    """rollout.engine=continuous for the assistant: greedy rewrites equal the static sampler's,
    with and without a mesh, at one slot per row and at fewer slots (halving as rows stop)."""
    want = cooper.local_rewriter(tiny_lm, 48, 12, temperature=0.0)(ITEMS[:3])
    assert len(want) == 3 and all(isinstance(t, str) for t in want)
    for kw in (dict(slots=0), dict(slots=2, slot_halvings=1)):
        plain = cooper.local_rewriter(tiny_lm, 48, 12, temperature=0.0, engine="continuous", **kw)
        assert plain(ITEMS[:3]) == want, kw
    sharded = cooper.local_rewriter(tiny_lm, 48, 12, temperature=0.0, mesh=_mesh((2, 2, 1)),
                                    batch_size=4, engine="continuous")
    assert sharded(ITEMS[:3]) == want


def test_slotted_continuous_rewrites_keep_their_rows(tiny_lm):
    """Sampled rewrites from the engine draw per row (prompt index) keys: a slotted request's
    rewrite does not depend on the other rows of the call, nor on the slot count."""
    fresh = lambda slots: cooper.local_rewriter(tiny_lm, 48, 12, mesh=_mesh((2, 2, 1)),
                                                batch_size=4, engine="continuous", slots=slots)
    every = fresh(0)(ITEMS[:4], slots=[0, 1, 2, 3])
    assert fresh(0)([ITEMS[2]], slots=[2]) == [every[2]]
    assert fresh(2)(ITEMS[:4], slots=[0, 1, 2, 3]) == every


def test_the_assistant_settings_carry_the_rollout_engine():
    c = config_lib.base_config()
    c.rollout.update(engine="continuous", slots=5, slot_halvings=1)
    local = cooper.AssistantSettings.from_config(c).local
    assert (local["engine"], local["slots"], local["slot_halvings"]) == ("continuous", 5, 1)


def test_slotted_rewrites_keep_their_rows(tiny_lm):
    """With slots, a request's rewrite is sampled at its own row (its prompt's index): it does
    not depend on which other prompts asked in the same call, as it must not depend on how the
    step's prompts are split over processes."""
    fresh = lambda: cooper.local_rewriter(tiny_lm, 48, 12, mesh=_mesh((2, 2, 1)), batch_size=4)
    rewrite = fresh()  # the n-th call of a rewriter samples with its n-th key
    assert rewrite.slotted
    every = rewrite(ITEMS[:4], slots=[0, 1, 2, 3])
    assert fresh()([ITEMS[2]], slots=[2]) == [every[2]]
    assert fresh()([ITEMS[3], ITEMS[0]], slots=[3, 0]) == [every[3], every[0]]
    with pytest.raises(ValueError, match=r"slots must give each conversation a row in \[0, 4\)"):
        rewrite([ITEMS[0]], slots=[4])


def test_make_rewriter_loads_the_assistant_in_the_model_sections_dtype(tiny_lm, loaded,
                                                                       monkeypatch):
    c = config_lib.base_config()
    c.model.update(param_dtype="float32", dtype="bfloat16")
    c.cooper.assistant_hf_path = tiny_lm
    c.rollout.update(prompts_per_step=6, max_new_tokens=8)
    seen = {}
    real = cooper.local_chat

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(cooper, "local_chat", spy)
    mesh = _mesh((1, 4, 1))
    rewrite = cooper.make_rewriter(cooper.AssistantSettings.from_config(c), mesh)
    assert seen["mesh"] is mesh and seen["dtype"] == "bfloat16" and seen["batch_size"] == 6
    (lm,) = loaded
    assert {x.dtype for x in jax.tree_util.tree_leaves(lm.params)} == {jnp.dtype(jnp.bfloat16)}
    assert len(rewrite(ITEMS[:2])) == 2


# ------------------------------------------------------------- build_pairs' calls of a rewriter
class _Verifier:
    """Candidates containing "####" have a final answer that is wrong; others have none."""

    def verify_batch_detailed(self, answers, candidates):
        return [types.SimpleNamespace(extracted="x" if "####" in c else None, correct=False,
                                      timed_out=False, error=None) for c in candidates]


RECORDS = [{"question": "3+4", "reference": "7"}, {"question": "5+5", "reference": "10"}]
TEXTS = ["3+4=7. #### 7", "5+5=10. #### 10"]


def _counting_rewriter(collective: bool, reply: str = "no answer"):
    calls = []

    def rewrite(items):
        calls.append(len(items))
        return [reply] * len(items)

    rewrite.collective = collective
    return rewrite, calls


def _pairs(rewriter, tries=3):
    return cooper.build_pairs("rewrite", RECORDS, TEXTS, np.ones(2), ["7", "10"], 1,
                              verifier=_Verifier(), rewriter=rewriter, tries=tries,
                              keep_rule="extracted")  # _Verifier models the extracted check


@pytest.mark.parametrize("collective", [False, True])
def test_build_pairs_calls_single_process_unchanged(collective):
    """One process: a collective rewriter is called exactly as a plain one."""
    rewrite, calls = _counting_rewriter(collective)
    pairs, stats = _pairs(rewrite)
    assert calls == [2, 2, 2] and pairs == [None, None]
    assert stats["pairs/negative_not_wrong"] == 2
    rewrite, calls = _counting_rewriter(collective, reply="#### 1")
    pairs, stats = _pairs(rewrite)
    assert calls == [2] and stats["pairs/valid"] == 2


def test_build_pairs_keeps_calling_a_collective_rewriter_while_another_host_has_requests(
        monkeypatch):
    """This host is done after one try; another host (simulated) still has requests: a collective
    rewriter is called with none until the tries are spent, a plain one is not."""
    asked = []

    def any_process(flag):
        asked.append(flag)
        return True  # some other host still has requests

    monkeypatch.setattr(cooper.host, "any_process", any_process)
    rewrite, calls = _counting_rewriter(True, reply="#### 1")
    pairs, stats = _pairs(rewrite)
    assert calls == [2, 0, 0] and asked == [True, False, False]
    assert stats["pairs/valid"] == 2 and stats["pairs/negative_not_wrong"] == 0
    rewrite, calls = _counting_rewriter(False, reply="#### 1")
    asked.clear()
    _pairs(rewrite)
    assert calls == [2] and asked == []


# ----------------------------------------------------------------------- two processes, for real
CHILD = """
    import json
    import sys
    import types

    import jax
    import numpy as np

    from coop_jax.rm import cooper
    from coop_jax import parallel


    class Verifier:  # every candidate is rejected: build_pairs spends all its tries
        def verify_batch_detailed(self, answers, candidates):
            return [types.SimpleNamespace(extracted=None) for _ in candidates]


    def main(model_dir, out_dir, items):
        parallel.maybe_initialize_distributed(True)
        me = jax.process_index()
        mesh = parallel.make_mesh((1, 4, 1))
        rewrite = cooper.local_rewriter(model_dir, 48, 12, mesh=mesh)
        assert rewrite.collective
        # different numbers of requests per host, then none on one of them
        first = rewrite(items[:3] if me == 0 else items[3:4])
        second = rewrite([] if me == 0 else items[4:6])
        calls = []

        def counted(batch):
            calls.append(len(batch))
            return rewrite(batch)

        counted.collective = rewrite.collective
        records = [{"question": q, "reference": "0"} for q, _ in items[:2]]
        texts = [p for _, p in items[:2]]
        n = 2 if me == 0 else 0  # host 1 has no positive at all
        pairs, stats = cooper.build_pairs("rewrite", records, texts,
                                          np.array([1.0] * n + [0.0] * (2 - n)), ["7", "10"],
                                          1, verifier=Verifier(), rewriter=counted, tries=3,
                                          keep_rule="extracted")
        with open(f"{out_dir}/p{me}.json", "w") as f:
            json.dump({"first": first, "second": second, "calls": calls,
                       "pairs": pairs, "stats": stats}, f)


    if __name__ == "__main__":
        main(sys.argv[1], sys.argv[2], [tuple(x) for x in json.loads(sys.argv[3])])
"""


def test_two_processes_share_one_sharded_rewriter(tiny_lm, tmp_path):
    """2 processes x 2 CPU devices, a (1, 4, 1) mesh: hosts asking for different numbers of
    rewrites (or none) all finish, each gets its own replies (those of the global batch's rows
    it supplied, as one process sampling that batch gets), and build_pairs makes the same
    number of calls on both hosts."""
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD))
    rc = launch([sys.executable, str(script), tiny_lm, str(tmp_path), json.dumps(ITEMS)],
                num_processes=2, devices_per_process=2, timeout_s=240)
    assert rc == 0
    got = [json.loads((tmp_path / f"p{i}.json").read_text()) for i in range(2)]
    # the global batches: block i = host i's rows padded (4 rows per host for 3 requests,
    # rounded to the mesh's 4 batch shards over 2 hosts; then 2 rows per host)
    plain = cooper.local_rewriter(tiny_lm, 48, 12)
    first = plain(ITEMS[:3] + ITEMS[:1] + ITEMS[3:4] * 4)
    second = plain(ITEMS[4:5] * 2 + ITEMS[4:6])
    assert got[0]["first"] == first[:3] and got[1]["first"] == first[4:5]
    assert got[0]["second"] == [] and got[1]["second"] == second[2:4]
    assert got[0]["calls"] == [2, 2, 2] and got[1]["calls"] == [0, 0, 0]
    assert got[0]["stats"]["pairs/negative_not_wrong"] == 2
    assert got[1]["stats"]["pairs/no_positive"] == 2
