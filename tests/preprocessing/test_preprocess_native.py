"""The native vocabulary hash tables (preprocessing._vocab) give what the numpy path gives, and the blocks of one
file processed in parallel give the bytes of a one-worker run (plain and gzip input, bad rows, errors)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from preprocessing import PreprocessConfig, readers, vocab
from preprocessing import run as preprocess
from preprocessing.errors import BadRowError
from helpers.datasets import assert_same_files

native = pytest.mark.skipif(vocab._vocab is None, reason="preprocessing._vocab is not built")


def _first_occurrence(values: np.ndarray, valid: np.ndarray) -> np.ndarray:
    seen, order = set(), []
    for v in values[valid].tolist():
        if v not in seen:
            seen.add(v)
            order.append(v)
    return np.array(order, values.dtype)


@native
@pytest.mark.parametrize("dtype", [np.uint32, np.int64, np.uint64, np.int32, np.int16])
def test_codes_are_first_occurrence_ranks_and_zero_where_missing(dtype):
    rng = np.random.default_rng(1)
    info = np.iinfo(dtype)
    pool = rng.integers(info.min, info.max, 500, dtype=dtype, endpoint=True)
    values = rng.choice(pool, 20_000)
    values[:3] = [0, info.min, info.max]
    valid = rng.random(len(values)) > 0.2
    distinct, codes = vocab.codes_of(values, valid)
    assert distinct.dtype == np.dtype(dtype) and codes.dtype == np.uint32
    np.testing.assert_array_equal(distinct, _first_occurrence(values, valid))
    assert (codes[~valid] == 0).all()
    np.testing.assert_array_equal(distinct[codes[valid].astype(np.int64) - 1], values[valid])
    d_all, c_all = vocab.codes_of(values)   # no mask: every value is coded
    assert c_all.min() == 1 and len(d_all) == len(np.unique(values))
    for expected in (1, 100, 500, 5000):   # a table sized for too few distinct values grows; too many: as well
        d_hint, c_hint = vocab.codes_of(values, valid, expected=expected)
        np.testing.assert_array_equal(d_hint, distinct)
        np.testing.assert_array_equal(c_hint, codes)


@native
def test_codes_of_empty_and_all_missing_blocks():
    distinct, codes = vocab.codes_of(np.array([], np.uint32))
    assert len(distinct) == 0 and len(codes) == 0
    distinct, codes = vocab.codes_of(np.array([5, 6], np.uint32), np.zeros(2, bool))
    assert len(distinct) == 0 and codes.tolist() == [0, 0]


def _colliding_keys(lookup_of, n: int, dtype) -> np.ndarray:
    """``n`` keys that all hash to one slot of a table built for ``n`` keys (long probe chains)."""
    probe = lookup_of(np.arange(1, n + 1, dtype=dtype))
    rng = np.random.default_rng(2)
    cand = rng.integers(0, np.iinfo(dtype).max, 200_000, dtype=dtype)
    slots = probe._slots(cand.copy())
    target = np.bincount(slots).argmax()
    keys = np.unique(cand[slots == target])[:n]
    assert len(keys) == n
    return keys


@native
@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
def test_lookup_matches_the_numpy_probe(monkeypatch, dtype):
    rng = np.random.default_rng(3)
    for keys in (_colliding_keys(lambda k: vocab.IntLookup(k, np.arange(1, len(k) + 1)), 6, dtype),
                 np.unique(rng.integers(0, 50_000, 20_000).astype(dtype))):
        table = vocab.IntLookup(keys, np.arange(1, len(keys) + 1))
        queries = np.concatenate([keys, rng.integers(0, 100_000, 30_000).astype(dtype), keys[::-1]])
        fast = table(queries)
        monkeypatch.setattr(vocab, "_vocab", None)
        slow = table(queries)
        monkeypatch.undo()
        np.testing.assert_array_equal(fast, slow)
        np.testing.assert_array_equal(fast[:len(keys)], np.arange(1, len(keys) + 1))   # every key found
        assert fast.dtype == slow.dtype


@native
def test_dictionary_encode_counts_and_encodes_as_the_numpy_path(monkeypatch):
    rng = np.random.default_rng(4)
    n = 5_000
    df = pl.DataFrame({"a": rng.integers(0, 300, n).astype(np.uint32), "b": rng.integers(-50, 50, n)})
    df = df.with_columns(pl.when(pl.Series(rng.random(n) < 0.1)).then(None).otherwise(pl.col("a")).alias("a"))
    vocabs = {f: pl.DataFrame({"value": np.unique(df[f].drop_nulls().to_numpy())[::2]})
              .with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).alias("index")) for f in "ab"}
    results = []
    for backend in (vocab._vocab, None):
        monkeypatch.setattr(vocab, "_vocab", backend)
        coded, dictionaries = vocab.dictionary_encode(df, ["a", "b"])
        counts = {f: c.sort("value") for f, c in vocab.block_counts(coded, ["a", "b"], dictionaries).items()}
        results.append((counts, vocab.Encoder(vocabs)(coded, dictionaries)))
    (counts, indices), (counts_np, indices_np) = results
    for f in "ab":
        assert counts[f].equals(counts_np[f])
        assert counts[f]["value"].dtype == df[f].dtype
        np.testing.assert_array_equal(indices[f], indices_np[f])
    assert (indices["a"][df["a"].is_null().to_numpy()] == 0).all()


def _criteo_rows(criteo_10k: Path) -> list[bytes]:
    with gzip.open(criteo_10k, "rb") as f:
        return f.read().splitlines(keepends=True)


def _run(inputs: list[Path], out: Path, workers: int, **options) -> Path:
    uri = preprocess(PreprocessConfig(inputs=[str(p) for p in inputs], out=str(out), frequency_threshold=2,
                                      workers=workers, progress=False, **options))
    return Path(uri)


@pytest.mark.parametrize("suffix", [".tsv", ".tsv.gz"])
def test_blocks_of_one_file_in_parallel_give_the_one_worker_bytes(criteo_10k, tmp_path, monkeypatch, suffix):
    rows = _criteo_rows(criteo_10k)
    data = tmp_path / f"day{suffix}"
    with (gzip.open if suffix.endswith(".gz") else open)(data, "wb") as f:
        f.writelines(rows)
    monkeypatch.setattr(readers, "BLOCK_BYTES", 1 << 16)   # ~25 blocks of ~270 rows
    one = _run([data], tmp_path / "one", 1)
    parsed = sorted((tmp_path / "one" / "_files").glob("*/parsed/*.ipc"))
    assert len(parsed) > 20
    many = _run([data], tmp_path / "many", 4)
    assert_same_files(one, many)


def test_parallel_blocks_report_bad_rows_as_one_worker(criteo_10k, tmp_path, monkeypatch):
    rows = _criteo_rows(criteo_10k)
    rows[2500] = b"1\tnot a row\n"
    rows[7000] = rows[7000].replace(b"\t", b"\tzz", 1)   # an integer that is not one
    data = tmp_path / "day.tsv"
    data.write_bytes(b"".join(rows))
    monkeypatch.setattr(readers, "BLOCK_BYTES", 1 << 16)
    with pytest.raises(BadRowError, match=r"line 2501\b"):   # the first bad line, though a later block fails too
        _run([data], tmp_path / "err", 4)
    one = _run([data], tmp_path / "one", 1, on_bad_row="skip", max_bad_fraction=0.01)
    many = _run([data], tmp_path / "many", 4, on_bad_row="skip", max_bad_fraction=0.01)
    assert_same_files(one, many)
    spec = (many / "feature_spec.yaml").read_text()
    assert "bad_rows: 2" in spec


def test_workers_default_to_the_cores_and_do_not_change_the_fingerprint(tmp_path, monkeypatch):
    import os
    config = PreprocessConfig(inputs=["x"], out=str(tmp_path))
    assert config.workers is None and config.threads() == (os.cpu_count() or 1)
    assert PreprocessConfig(inputs=["x"], out=str(tmp_path), workers=3).threads() == 3
    assert "workers" not in config.output_settings()


@native
def test_without_the_native_tables_the_same_bytes(criteo_10k, tmp_path, monkeypatch):
    with_native = _run([criteo_10k], tmp_path / "native", 2)
    monkeypatch.setattr(vocab, "_vocab", None)   # as where the extension is not built
    assert_same_files(with_native, _run([criteo_10k], tmp_path / "numpy", 2))


@native
@pytest.mark.parametrize("dtype", [np.uint32, np.int64, np.int32, np.uint64, np.int16])
@pytest.mark.parametrize("rows", [5000, 400_000])   # one partition; 8 partitions, threads used
def test_sum_counts_matches_the_polars_group_by(monkeypatch, dtype, rows):
    rng = np.random.default_rng(5)
    info = np.iinfo(dtype)
    pool = rng.integers(info.min, info.max, rows // 3, dtype=dtype, endpoint=True)   # values that recur
    parts = [pl.DataFrame({"value": rng.choice(pool, k), "count": rng.integers(1, 1 << 40, k)})
             for k in (rows // 2, 10, rows // 2)]
    parts.append(parts[0].clear())   # an empty part
    parts.append(pl.concat([parts[1], parts[0].head(7), parts[2].tail(3)], rechunk=False))   # one of 3 chunks
    one, three = vocab.sum_counts(parts), vocab.sum_counts(parts, threads=3)
    assert one.equals(three)   # the same rows in the same order, whatever the threads
    monkeypatch.setattr(vocab._vocab, "VERSION", 4)   # an older build: its dictionary codes and a bincount
    older = vocab.sum_counts(parts).sort("value")
    monkeypatch.setattr(vocab, "_vocab", None)
    slow = vocab.sum_counts(parts).sort("value")
    assert one.sort("value").equals(slow) and older.equals(slow) and one["value"].dtype == parts[0]["value"].dtype


@native
@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
@pytest.mark.parametrize("code_dtype", [np.uint8, np.uint16, np.uint32])
def test_native_gather_and_bincount_give_numpys(dtype, code_dtype):
    rng = np.random.default_rng(0)
    m = 200 if code_dtype == np.uint8 else 1000
    table = rng.integers(0, 100, m).astype(dtype)
    codes = rng.integers(0, m, 50_000).astype(code_dtype)
    taken = vocab.take(table, codes)
    assert taken.dtype == table.dtype and np.array_equal(taken, table[codes])
    counted = vocab.bincount(codes, m + 1)
    assert counted.dtype == np.int64 and np.array_equal(counted, np.bincount(codes, minlength=m + 1))
    weights = rng.integers(1, 1 << 50, len(codes))   # sums beyond float64's exact integers
    summed = vocab.bincount(codes, m + 1, weights)
    expected = np.zeros(m + 1, np.int64)
    np.add.at(expected, codes, weights)
    assert summed.dtype == np.int64 and np.array_equal(summed, expected)
    with pytest.raises(ValueError, match="not below"):
        vocab.take(table, np.array([m], code_dtype))
    with pytest.raises(ValueError, match="not below"):
        vocab.bincount(np.array([7], code_dtype), 7)


def _inflaters() -> list:
    import zlib
    try:
        from isal import isal_zlib
    except ImportError:
        return [zlib]
    return [zlib, isal_zlib]


@pytest.mark.parametrize("inflate", _inflaters(), ids=lambda m: m.__name__)
def test_gunzip_reads_every_member_and_rejects_a_truncated_stream(inflate):
    import io
    data = gzip.compress(b"a\nb\n") + gzip.compress(b"") + gzip.compress(b"c\n" * 1000)
    whole = readers._Gunzip(io.BytesIO(data), inflate)
    assert whole.read(1) + whole.read(10 ** 6) == b"a\nb\n" + b"c\n" * 1000 and whole.read(5) == b""
    assert readers._Gunzip(io.BytesIO(b""), inflate).read(10) == b""
    with pytest.raises(EOFError):
        readers._Gunzip(io.BytesIO(data[:-6]), inflate).read(10 ** 6)
    with pytest.raises(readers.TrailingData, match=rf"byte {len(data):,} of the file"):
        readers._Gunzip(io.BytesIO(data + b"not gzip, and longer than a header"), inflate).read(10 ** 6)
    padded = readers._Gunzip(io.BytesIO(data + b"\0" * 5000), inflate)   # zero padding (tar) is no data
    assert padded.read(10 ** 6) == b"a\nb\n" + b"c\n" * 1000 and padded.read(5) == b""
    with pytest.raises(inflate.error):   # a member that starts but is corrupt is no trailing garbage
        readers._Gunzip(io.BytesIO(data + data[:10] + b"\xff" * 40), inflate).read(10 ** 6)


def test_gzip_inputs_read_the_same_with_isal_and_without(criteo_10k):
    """ISA-L (the default where isal is installed) and zlib (its fallback) give the same blocks of a .gz input;
    without the isal package the reader falls back to zlib."""
    import subprocess
    import sys
    import zlib
    isal_zlib = pytest.importorskip("isal.isal_zlib")
    assert readers.INFLATE is isal_zlib
    with open(criteo_10k, "rb") as f:
        fast = readers._Gunzip(f, isal_zlib).read(1 << 30)
    with open(criteo_10k, "rb") as f:
        assert fast == readers._Gunzip(f, zlib).read(1 << 30) == gzip.decompress(Path(criteo_10k).read_bytes())
    code = ("import sys; sys.modules['isal'] = None; import zlib; from preprocessing import readers; "
            f"assert readers.INFLATE is zlib; print(len(readers._Gunzip(open({str(criteo_10k)!r}, 'rb')).read(1 << 30)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.split() == [str(len(fast))], done.stderr


@native
def test_fast_parse_codes_as_dictionary_encode(criteo_10k):
    from feature_spec import CRITEO_COLUMNS, criteo_spec
    from preprocessing import fastparse
    from preprocessing.transforms import Transforms
    if fastparse._criteo is None:
        pytest.skip("preprocessing._criteo is not built")
    t = Transforms.from_spec(criteo_spec(), 2)
    block = gzip.open(criteo_10k).read()
    block = block[:block.rfind(b"\n") + 1]
    coded = fastparse.block_parser(readers.Format("criteo", columns=list(CRITEO_COLUMNS)), t, t.parse_types(),
                                   coded=True)(block)
    rows, dictionaries = vocab.dictionary_encode(fastparse.parse_block(block), t.vocab_features)
    assert isinstance(coded, vocab.Coded) and coded.rows.equals(rows)
    assert coded.dictionaries.keys() == dictionaries.keys()
    for f, values in dictionaries.items():
        np.testing.assert_array_equal(coded.dictionaries[f], values)
