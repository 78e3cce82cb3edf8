"""The scores output on a real S3 endpoint (moto's server): written whole with its completion marker, which
readers check; a scoring that raises publishes neither the Parquet nor the marker (issue 19, section 8)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from common.errors import UserError
from common.store import filesystem
from models.scoring import check_scores, read_scores

OUT = "s3://store/scores/2026-11-08.parquet"


def _inputs(tmp_path, rows: int, probabilities: int):
    """A positions Parquet of ``rows`` rows and a one-rank parts folder of ``probabilities`` probabilities."""
    from training.score import META, part_name

    positions = tmp_path / "positions.parquet"
    pq.write_table(pa.table({"file": ["day.tsv"] * rows, "row": np.arange(rows), "label": np.arange(rows) % 2}),
                   positions)
    parts = tmp_path / "parts"
    parts.mkdir(exist_ok=True)
    (parts / META).write_text(json.dumps({"rows": probabilities, "batch_rows": 64, "world_size": 1}))
    np.linspace(0.1, 0.9, probabilities, dtype=np.float32).tofile(parts / part_name(0))
    return positions, parts


def test_scores_are_published_with_a_marker_and_a_failed_rewrite_unpublishes(s3_server, tmp_path):
    from training.score import write_scores

    summary = write_scores(*_inputs(tmp_path, 200, 200), OUT)
    assert summary["rows"] == 200 and check_scores(OUT)["rows"] == 200
    table = read_scores(OUT)
    assert table.num_rows == 200 and table.column_names == ["file", "row", "probability", "label"]

    with pytest.raises(StopIteration):   # fewer probabilities than rows: the write raises midway
        write_scores(*_inputs(tmp_path, 300, 100), OUT)
    fs, path = filesystem(OUT)
    assert pq.read_table(fs.open(path, "rb")).num_rows == 200   # the failed write published nothing
    with pytest.raises(UserError, match=r"are not complete: no matching completion marker .*\.complete.*Fix"):
        check_scores(OUT)   # its marker was withdrawn before the rewrite
    assert not s3_server.list_multipart_uploads(Bucket="store").get("Uploads")
