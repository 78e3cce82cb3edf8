"""The scores output on a full disk (issue 34, section 4): refused before it is written when less space is free than
the rows' positions and probabilities take, in one line naming the output, the free space and the fix; with room,
written as before."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from common.space import NoSpace
from training.score import META, part_name, write_scores


def test_scores_larger_than_the_free_space_are_refused_before_writing(tmp_path, monkeypatch):
    rows = 1000
    positions, parts, out = tmp_path / "positions.parquet", tmp_path / "parts", tmp_path / "out" / "scores.parquet"
    pq.write_table(pa.table({"file": ["a"] * rows, "row": np.arange(rows), "label": np.arange(rows) % 2}), positions)
    parts.mkdir()
    np.linspace(0.01, 0.99, rows, dtype=np.float32).tofile(parts / part_name(0))
    (parts / META).write_text(json.dumps({"rows": rows, "world_size": 1, "batch_rows": 256}))
    need = positions.stat().st_size + 4 * rows

    monkeypatch.setattr("common.space.usage", lambda uri: (need - 1, 1 << 30, "/data"))
    with pytest.raises(NoSpace, match=rf"^not enough free space to write the scores {out} at {out}: it needs about "
                                      rf"\S+ KiB \(the rows' positions and probabilities\), free: \S+ KiB of 1\.0 GiB "
                                      r"on /data\. Fix: free space on /data, or write the scores to a filesystem with "
                                      r"room \(--out\)$"):
        write_scores(positions, parts, str(out))
    assert not out.exists()

    monkeypatch.setattr("common.space.usage", lambda uri: (need, 1 << 30, "/data"))
    assert write_scores(positions, parts, str(out))["rows"] == rows
    assert pq.read_table(out).column_names == ["file", "row", "probability", "label"]
