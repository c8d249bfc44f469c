"""PromptPipeline (resume, host sharding), tokenize_prompts, to_global_array."""
import json

import numpy as np
import pytest

from coop_jax.data import PromptPipeline, to_global_array
from coop_jax.sampling import tokenize_prompts


def recs(n):
    return [{"id": f"r{i}", "question": f"q{i}", "reference": str(i), "solution": None,
             "rephrased": None} for i in range(n)]


def ids(batch):
    return [r["id"] for r in batch]


def take(pipe, k):
    return [ids(pipe.next_batch()) for _ in range(k)]


def test_exact_resume_across_epochs():
    data = recs(23)  # 5 batches of 4 per epoch, remainder 3 dropped
    reference = take(PromptPipeline(data, batch_size=4, seed=5, process_index=0,
                                    process_count=1), 17)
    first = PromptPipeline(data, batch_size=4, seed=5, process_index=0, process_count=1)
    assert take(first, 7) == reference[:7]
    state = json.loads(json.dumps(first.state()))
    assert state["epoch"] == 1 and state["position"] == 8
    resumed = PromptPipeline(data, batch_size=4, seed=5, process_index=0, process_count=1)
    resumed.restore(state)
    assert take(resumed, 10) == reference[7:]


def test_epochs_reshuffle_deterministically():
    data = recs(40)
    a = take(PromptPipeline(data, batch_size=8, seed=0, process_index=0, process_count=1), 10)
    b = take(PromptPipeline(data, batch_size=8, seed=0, process_index=0, process_count=1), 10)
    c = take(PromptPipeline(data, batch_size=8, seed=1, process_index=0, process_count=1), 10)
    assert a == b and a != c
    epoch0, epoch1 = sum(a[:5], []), sum(a[5:], [])
    assert sorted(epoch0) == sorted(epoch1) == sorted(ids(data))  # each epoch covers all
    assert epoch0 != epoch1  # and is reshuffled


def test_four_fake_hosts_shard_disjointly_and_cover():
    data = recs(64)
    single = PromptPipeline(data, batch_size=16, seed=3, process_index=0, process_count=1)
    hosts = [PromptPipeline(data, batch_size=16, seed=3, process_index=h, process_count=4)
             for h in range(4)]
    seen = [[] for _ in hosts]
    for _ in range(4):  # one epoch
        global_batch = ids(single.next_batch())
        local = [ids(p.next_batch()) for p in hosts]
        assert all(len(b) == 4 for b in local)
        assert sum(local, []) == global_batch  # host slices concatenate to the global batch
        for h, b in enumerate(local):
            seen[h] += b
    sets = [set(s) for s in seen]
    assert all(len(s) == 16 for s in sets)
    assert set().union(*sets) == set(ids(data))
    assert sum(len(s) for s in sets) == 64  # disjoint
    # Resuming on a different host count continues the same global stream.
    state = hosts[0].state()
    nxt = ids(single.next_batch())
    two = [PromptPipeline(data, batch_size=16, seed=3, process_index=h, process_count=2)
           for h in range(2)]
    for p in two:
        p.restore(state)
    assert ids(two[0].next_batch()) + ids(two[1].next_batch()) == nxt


def test_keep_remainder():
    data = recs(10)
    pipe = PromptPipeline(data, batch_size=4, seed=0, process_index=0, process_count=1,
                          drop_remainder=False)
    epoch = take(pipe, 3)
    assert [len(b) for b in epoch] == [4, 4, 2]
    assert sorted(sum(epoch, [])) == sorted(ids(data))
    assert len(pipe.next_batch()) == 4 and pipe.state()["epoch"] == 1
    hosts = [PromptPipeline(data, batch_size=4, seed=0, process_index=h, process_count=2,
                            drop_remainder=False) for h in range(2)]
    last = [take(p, 3)[-1] for p in hosts]
    assert last[0] + last[1] == epoch[-1]


def test_default_process_index_from_jax():
    pipe = PromptPipeline(recs(8), batch_size=4, seed=0)
    assert (pipe.process_index, pipe.process_count, pipe.local_batch_size) == (0, 1, 4)


@pytest.mark.parametrize("kwargs, match", [
    ({"batch_size": 6, "process_count": 4, "process_index": 0}, "divisible"),
    ({"batch_size": 4, "process_count": 2, "process_index": 2}, "process_index"),
    ({"batch_size": 0, "process_count": 1, "process_index": 0}, "batch_size"),
    ({"batch_size": 64, "process_count": 1, "process_index": 0}, "exceeds"),
])
def test_pipeline_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PromptPipeline(recs(10), seed=0, **kwargs)


def test_restore_rejects_mismatch():
    pipe = PromptPipeline(recs(10), batch_size=2, seed=0, process_index=0, process_count=1)
    other = PromptPipeline(recs(10), batch_size=2, seed=1, process_index=0, process_count=1)
    with pytest.raises(ValueError, match="seed"):
        pipe.restore(other.state())
    with pytest.raises(ValueError, match="position"):
        pipe.restore({"epoch": 0, "position": 11})
    with pytest.raises(ValueError, match="lacks 'epoch'"):
        pipe.restore({"position": 0})


class CharTokenizer:
    pad_token_id = 0

    def encode(self, text):
        return [ord(c) for c in text]


def test_tokenize_left_pad_and_truncate():
    ids_, mask, n = tokenize_prompts(CharTokenizer(), ["ab", "abcdefg", "x"], 4,
                                     return_num_truncated=True)
    assert ids_.dtype == np.int32 and mask.dtype == np.bool_ and ids_.shape == (3, 4)
    assert ids_.tolist() == [[0, 0, 97, 98], [100, 101, 102, 103], [0, 0, 0, 120]]
    assert mask.tolist() == [[False, False, True, True], [True] * 4, [False, False, False, True]]
    assert n == 1
    assert len(tokenize_prompts(CharTokenizer(), ["a"], 2)) == 2
    with pytest.raises(ValueError, match="zero tokens"):
        tokenize_prompts(CharTokenizer(), ["ok", ""], 4)
    no_pad = CharTokenizer()
    no_pad.pad_token_id = None
    with pytest.raises(ValueError, match="pad_token_id"):
        tokenize_prompts(no_pad, ["a"], 4)


def test_tokenize_with_hf_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"[PAD]": 0, "[UNK]": 1, "[BOS]": 2}
    vocab.update({c: i + 3 for i, c in enumerate("0123456789+-= ")})
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    core.post_processor = processors.TemplateProcessing(single="[BOS] $A",
                                                        special_tokens=[("[BOS]", 2)])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="[PAD]", unk_token="[UNK]",
                                  bos_token="[BOS]")
    plain, mask = tokenize_prompts(tok, ["1+2", "10"], 5)
    assert plain.tolist() == [[0, 0, 4, 13, 5], [0, 0, 0, 4, 3]]
    assert mask.sum(1).tolist() == [3, 2]
    special, _ = tokenize_prompts(tok, ["1+2"], 5, add_special_tokens=True)
    assert special.tolist() == [[0, 2, 4, 13, 5]]


def test_to_global_array():
    import jax
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "model"))
    local = np.arange(8 * 3, dtype=np.int32).reshape(8, 3)
    arr = to_global_array(local, mesh, P("data"))
    assert arr.shape == (8, 3)
    assert arr.sharding.spec == P("data")
    assert len(arr.addressable_shards) == 8
    np.testing.assert_array_equal(np.asarray(arr), local)
    assert arr.addressable_shards[0].data.shape == (2, 3)
