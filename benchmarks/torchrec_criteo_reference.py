"""The reference: TorchRec's own Criteo utilities on one raw TSV file.

``BinaryCriteoUtils.tsv_to_npys`` (parse to dense/sparse/label .npy) then
``sparse_to_contiguous`` (frequency-thresholded contiguous ids), as TorchRec's
``scripts/npy_preproc_criteo`` and ``contiguous_preproc_criteo`` run them.

usage: python benchmarks/torchrec_criteo_reference.py IN.tsv OUT_DIR THRESHOLD
"""

import os
import sys
import time

from torchrec.datasets.criteo import BinaryCriteoUtils


def main(in_file: str, out_dir: str, threshold: int) -> None:
    os.makedirs(out_dir, exist_ok=True)
    t0 = time.perf_counter()
    sparse = os.path.join(out_dir, "day_0_sparse.npy")
    BinaryCriteoUtils.tsv_to_npys(in_file, os.path.join(out_dir, "day_0_dense.npy"), sparse,
                                  os.path.join(out_dir, "day_0_labels.npy"))
    t1 = time.perf_counter()
    BinaryCriteoUtils.sparse_to_contiguous([sparse], out_dir, frequency_threshold=threshold)
    t2 = time.perf_counter()
    print(f"tsv_to_npys {t1 - t0:.2f} s, sparse_to_contiguous {t2 - t1:.2f} s")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
