"""`checkpoint.portable`: a fine-tuned model kept as its difference from its public base."""
import numpy as np
import pytest

from coop_jax.checkpoint import portable


def _trees():
    rng = np.random.default_rng(0)
    base = {"embed": {"embedding": rng.normal(size=(40, 16)).astype(np.float32)},
            "layer": {"kernel": rng.normal(size=(16, 32)).astype(np.float32),
                      "norm": rng.normal(size=(16,)).astype(np.float32)}}
    decay = np.float32(0.9993)
    embedding = base["embed"]["embedding"] * decay  # untouched rows: weight decay only
    embedding[[3, 7]] += rng.normal(size=(2, 16)).astype(np.float32) * 0.01
    trained = {"embed": {"embedding": embedding},
               "layer": {"kernel": base["layer"]["kernel"]
                         + rng.normal(size=(16, 32)).astype(np.float32) * 1e-3,
                         "norm": base["layer"]["norm"] + 0.5}}
    return base, trained


def test_encoding_keeps_touched_rows_and_small_leaves_exactly():
    base, trained = _trees()
    arrays, layout = portable.encode(trained, base, steps=1, small_leaf=16)
    assert layout["['layer']['norm']"] == {"kind": "exact"}
    assert layout["['layer']['kernel']"] == {"kind": "delta16"}
    emb = layout["['embed']['embedding']"]
    assert emb["kind"] == "rows" and emb["touched_rows"] == 2
    assert list(arrays["['embed']['embedding']:rows"]) == [3, 7]
    assert abs(emb["factor"] - 0.9993) < 1e-6
    decoded = portable.decode(arrays, layout, base)
    np.testing.assert_array_equal(decoded["layer"]["norm"], trained["layer"]["norm"])
    np.testing.assert_array_equal(decoded["embed"]["embedding"][[3, 7]],
                                  trained["embed"]["embedding"][[3, 7]])
    np.testing.assert_allclose(decoded["embed"]["embedding"], trained["embed"]["embedding"],
                               rtol=1e-6, atol=0)
    delta = trained["layer"]["kernel"] - base["layer"]["kernel"]
    error = np.abs(decoded["layer"]["kernel"] - trained["layer"]["kernel"])
    assert np.all(error <= np.abs(delta) * 2.0 ** -10 + 1e-7)  # float16: 11-bit significand


def test_decoding_is_a_function_of_the_kept_arrays_and_the_base():
    """Two decodes (as on two machines loading the same base) give the same bits; the encoded
    form is smaller than the float32 tree."""
    base, trained = _trees()
    arrays, layout = portable.encode(trained, base, steps=1, small_leaf=16)
    a = portable.decode(arrays, layout, base)
    b = portable.decode({k: v.copy() for k, v in arrays.items()}, layout,
                           {k: {n: x.copy() for n, x in v.items()} for k, v in base.items()})
    for (x, y) in zip(*(portable._named_leaves(t).values() for t in (a, b))):
        assert x.tobytes() == y.tobytes()
    encoded = sum(v.nbytes for v in arrays.values())
    assert encoded < sum(x.nbytes for x in portable._named_leaves(trained).values()) * 0.6


def _kept_folder(tmp_path, trained, base):
    import json
    tmp_path.mkdir(parents=True, exist_ok=True)
    arrays, layout = portable.encode(trained, base, steps=1, small_leaf=16)
    portable.write_encoded(arrays, layout, str(tmp_path))
    decoded = portable.decode(arrays, layout, base)
    (tmp_path / portable.SUMMARY).write_text(json.dumps(
        {"digests": {"rm_params": portable.params_digest(decoded)}}))
    (tmp_path / portable.META).write_text(json.dumps({"step": 1}))
    return decoded


def test_restore_gives_the_kept_parameters_and_refuses_another_base(tmp_path):
    base, trained = _trees()
    decoded = _kept_folder(tmp_path, trained, base)
    assert portable.is_portable(str(tmp_path)) and not portable.is_portable(str(tmp_path / "x"))
    params, meta = portable.restore(str(tmp_path), base)
    assert meta == {"step": 1}
    assert portable.params_digest(params) == portable.params_digest(decoded)
    other = {"embed": base["embed"], "layer": dict(base["layer"],
                                                    kernel=base["layer"]["kernel"] + 1e-3)}
    with pytest.raises(portable.DigestMismatch, match="another base"):
        portable.restore(str(tmp_path), other)


def test_the_compact_encoding_moves_no_weight_by_more_than_a_254th_of_its_rows_largest_delta():
    """int8 rows with one scale each: the matrices and the touched embedding rows within
    1/254 of their row's largest delta of the exact encoding's model; the untouched rows and the
    small leaves the same bits; the arrays a quarter of the float32 deltas' bytes."""
    base, trained = _trees()
    arrays, layout = portable.encode(trained, base, steps=1, small_leaf=16)
    exact = portable._named_leaves(portable.decode(arrays, layout, base))
    small, specs = portable.compact(arrays, layout, base)
    assert specs["['layer']['kernel']"] == {"kind": "delta8"}
    assert specs["['embed']['embedding']"]["kind"] == "rows8"
    assert small["['layer']['kernel']"].dtype == np.int8
    got = portable._named_leaves(portable.decode(small, specs, base))
    np.testing.assert_array_equal(got["['layer']['norm']"], exact["['layer']['norm']"])
    base_leaves = portable._named_leaves(base)
    emb, kernel = "['embed']['embedding']", "['layer']['kernel']"
    untouched = [r for r in range(40) if r not in (3, 7)]
    assert got[emb][untouched].tobytes() == exact[emb][untouched].tobytes()
    decayed = base_leaves[emb] * np.float32(layout[emb]["factor"])
    for name, rows, delta in ((kernel, slice(None), exact[kernel] - base_leaves[kernel]),
                              (emb, [3, 7], (exact[emb] - decayed)[[3, 7]])):
        bound = np.abs(delta).max(axis=1, keepdims=True) / 254
        assert np.all(np.abs(got[name][rows] - exact[name][rows]) <= bound * 1.001 + 1e-7)
    with pytest.raises(ValueError, match="already kept as"):
        portable.compact(small, specs, base)


def test_a_compact_folder_restores_from_its_xz_arrays_with_its_own_digest(tmp_path):
    """`compact_folder` writes the xz arrays (and no uncompressed ones), the meta, and a summary
    with the compact model's digest beside the exact one's; `restore` reads it and checks that
    digest. A folder whose arrays are missing names the restore command."""
    import json
    base, trained = _trees()
    exact = _kept_folder(tmp_path / "exact", trained, base)
    summary = portable.compact_folder(str(tmp_path / "exact"), str(tmp_path / "small"), base)
    files = sorted(p.name for p in (tmp_path / "small").iterdir())
    assert files == sorted([portable.ENCODED_XZ, portable.LAYOUT, portable.META,
                            portable.SUMMARY])
    assert summary["compact_of"]["rm_params"] == portable.params_digest(exact)
    params, meta = portable.restore(str(tmp_path / "small"), base)
    assert meta == {"step": 1}
    assert portable.params_digest(params) == summary["digests"]["rm_params"] != \
        summary["compact_of"]["rm_params"]
    assert json.loads((tmp_path / "small" / portable.SUMMARY).read_text()) == summary
    (tmp_path / "exact" / portable.ENCODED).unlink()
    with pytest.raises(FileNotFoundError, match="python -m coop_jax.projects.restore"):
        portable.restore(str(tmp_path / "exact"), base)


@pytest.mark.parametrize("argv, message", [
    ([], "expected the command `compact`"),
    (["compact", "--src=/no/such"], "--src and --out are required"),
    (["compact", "--src=/no/such", "--out=/tmp/x"], "--src: no such folder"),
])
def test_the_compact_command_says_what_is_wrong_in_one_line(argv, message):
    from absl.app import UsageError
    with pytest.raises(UsageError, match=message):
        portable.main(["portable", *argv])
