"""benchmarks/bench_serve.py, the serving formats' benchmark, kept from rotting: at a tiny size (3 tables, small
batches) every format exports, loads and runs, prints its JSON line, the machine and the table; the int8 program is
smaller than the float one by what its tables save."""

from __future__ import annotations

import json
import sys

from helpers.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import bench_serve  # noqa: E402


def test_every_format_runs_at_a_tiny_size(capsys):
    tables, rows, dim = 3, 20000, 16
    assert bench_serve.main(["--tables", str(tables), "--rows", str(rows), "--dim", str(dim), "--calls", "3",
                             "--batches", "1", "--big", "16"]) == 0
    stdout = capsys.readouterr().out
    lines = {r["format"]: r for r in (json.loads(x) for x in stdout.splitlines() if x.startswith("{"))}
    assert list(lines) == list(bench_serve.FORMATS)
    for r in lines.values():
        assert r["bytes"] > 0 and r["rows_per_s"] > 0 and 0 < r["p50_batch1_ms"] <= r["p99_batch1_ms"], r
    saved = tables * rows * (4 * dim - (dim + 8))   # float32 rows against int8 codes + scale + minimum
    assert abs(lines["pt2"]["bytes"] - lines["pt2-int8"]["bytes"] - saved) < 0.05 * saved
    assert lines["raw"]["bytes"] > lines["pt2"]["bytes"]   # the raw program holds the vocabularies' keys too
    assert "bench_serve: " in stdout and "load average" in stdout
    table = stdout[stdout.index("| format |"):].splitlines()
    assert [row.split(" | ")[0].strip("| ") for row in table[2:]] == list(bench_serve.FORMATS)
