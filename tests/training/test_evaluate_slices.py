"""An evaluation's slices (issue 41 §3) need each gathered prediction's row: ``gathered_rows`` is the order in which
``Trainer.predict`` gathers them, checked here against the real batching of a split (``SplitBinaryDataset.batches``:
each rank's share of every global batch, rank after rank), on several batches and ranks; and a slice setting that
names no one-value categorical is one line naming those it could be."""

from __future__ import annotations

import numpy as np
import pytest

from common.errors import UserError
from feature_spec import load as load_spec
from training.data import SplitBinaryDataset
from training.evaluate_slices import check_feature, gathered_rows


@pytest.mark.parametrize("batch_size, world_size", [(64, 2), (100, 3), (1000, 1)])
def test_gathered_rows_follow_the_ranks_batches(small_dataset, batch_size, world_size):
    data = SplitBinaryDataset(str(small_dataset), "test")
    column = np.fromfile(small_dataset / "test" / "cat_c3.bin", data.spec.feature_spec["c3"].dtype)
    gathered = []
    for rank in range(world_size):
        for batch in data.batches(batch_size, rank=rank, world_size=world_size, prefetch=0):
            ids = batch.sparse_features["c3"].values().numpy()
            gathered.append(ids[batch.labels.numpy() >= 0])   # padded rows dropped, as Trainer.predict does
    order = gathered_rows(data.num_rows, batch_size, world_size)
    assert sorted(order) == list(range(data.num_rows))
    assert np.array_equal(column[order], np.concatenate(gathered))


def test_a_slice_feature_must_be_a_one_value_categorical(small_dataset):
    spec = load_spec(str(small_dataset))
    check_feature(spec, "c1", "slice_by", "ds")
    with pytest.raises(UserError, match=r"ds: gauc_by 'n0' is no categorical feature of the dataset\. Fix: name a "
                                        r"categorical feature with one value a row: c0, c1, c2, c3\."):
        check_feature(spec, "n0", "gauc_by", "ds")
