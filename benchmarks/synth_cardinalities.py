"""Distinct values, values seen once and values kept at a frequency threshold, per categorical column, of
``dlrmflow synth`` data at N rows against what the real Kaggle counts imply (a markdown table).

Draws each column's ids with the generator's own sampler and fitted profile (``synthetic.columns.fit``), N
non-missing draws per column, no TSV: the same distribution as ``dlrmflow synth --rows N``, much faster.
The "real" columns: the power law through the real first-10k and full-Kaggle counts, whose share of
values seen once is its exponent b and whose share seen at least T times is Gamma(T-b)/(Gamma(T)Gamma(1-b))
(Poisson sampling from a distribution whose distinct count grows as n**b).

    python benchmarks/synth_cardinalities.py --rows 20000000 [--threshold 3] [--columns C3,C12]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from synthetic import columns as sc  # noqa: E402


def kept_share(b: float, threshold: int) -> float:
    """Share of the distinct values seen at least ``threshold`` times under a power law of exponent ``b``."""
    if b <= 0:
        return 1.0
    return math.exp(math.lgamma(threshold - b) - math.lgamma(threshold) - math.lgamma(1 - b))


def measure(name: str, rows: int, threshold: int, rng: np.random.Generator) -> dict:
    """One column at ``rows`` rows: fitted vocabulary and fresh share, measured and power-law counts."""
    prof = sc.CATEGORICAL[name]
    fitted, vocab = sc.fit(prof, rows)
    ids = sc.sample_ids(rng, fitted, vocab, round(rows * (1 - prof.missing)))
    _, counts = np.unique(ids, return_counts=True)
    real_d = prof.distinct_10k * (rows / sc.REFERENCE_ROWS) ** prof.exponent
    return {"column": name, "kaggle": prof.kaggle, "vocab": vocab, "fresh": fitted.fresh,
            "distinct": len(counts), "single": float((counts == 1).mean()),
            "kept": int((counts >= threshold).sum()),
            "real_distinct": real_d, "real_single": prof.exponent,
            "real_kept": real_d * kept_share(prof.exponent, threshold)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=float, default=20e6)
    parser.add_argument("--threshold", type=int, default=3)
    parser.add_argument("--columns", default=",".join(sc.CATEGORICAL))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rows, t = int(args.rows), args.threshold
    rng = np.random.default_rng(args.seed)
    print(f"| column | Kaggle 45.8M | power law at {rows / 1e6:g}M | synth | seen once: b | synth "
          f"| kept at T={t}: power law | synth | synth vocabulary | fresh share |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    totals = np.zeros(4)
    for name in args.columns.split(","):
        start = time.perf_counter()
        r = measure(name, rows, t, rng)
        totals += [r["real_distinct"], r["distinct"], r["real_kept"], r["kept"]]
        print(f"| {name} | {r['kaggle']:,} | {r['real_distinct']:,.0f} | {r['distinct']:,} | {r['real_single']:.3f} "
              f"| {r['single']:.3f} | {r['real_kept']:,.0f} | {r['kept']:,} | {r['vocab']:,} | {r['fresh']:.4f} |",
              flush=True)
        print(f"  ({time.perf_counter() - start:.1f} s)", file=sys.stderr)
    print(f"| all | | {totals[0]:,.0f} | {totals[1]:,.0f} | | | {totals[2]:,.0f} | {totals[3]:,.0f} | | |")


if __name__ == "__main__":
    main()
