"""Synthetic Criteo-format click logs with labels from a known (planted) model.

Rows look like the real Kaggle DAC ``train.txt`` (see ``synthetic_columns``); the label is
Bernoulli(sigmoid(logit)) of a planted model, so the best achievable ROC AUC and log loss
(those of the true probabilities) are known and recorded in ``_synth_metadata.json`` (a leading ``_``: folder inputs skip it).
Rows depend only on (seed, rows): they come in fixed blocks of ``BLOCK_ROWS`` rows with one
random stream per block, so neither ``files`` nor ``workers`` changes the bytes written.
"""

from __future__ import annotations

import gzip as gzip_module
import io
import json
import math
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Annotated

import fsspec
import numpy as np
import polars as pl
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from common.atomic import atomic_open, write_atomic

from common.errors import UserError
from feature_spec.presets import CRITEO_CATEGORICAL, CRITEO_NUMERICAL

from . import synthetic_columns as sc

GENERATOR_VERSION = 1
BLOCK_ROWS = 65_536
CALIBRATION_ROWS = 200_000
METADATA_FILE = "_synth_metadata.json"
GZIP_LEVEL = 6

EFFECT_CATEGORICAL = ("C1", "C2", "C4", "C6", "C8", "C10", "C11", "C13", "C15", "C18", "C19", "C24", "C26")
EFFECT_NUMERICAL = ("I1", "I3", "I5", "I6", "I7", "I11", "I13")
INTERACTION = ("C14", "C17")
INTERACTION_K = 8
# shares of the planted logit's variance: categorical effects, numerical effects, interaction
VARIANCE_SHARES = (0.6, 0.25, 0.15)


_SUFFIXES = {"k": 10**3, "m": 10**6, "g": 10**9}


def _row_count(value):
    """A row count such as 1000000, 1e6, 250k or 10M (text), else the value unchanged."""
    if not isinstance(value, str):
        return value
    t = value.strip().lower().replace("_", "")
    scale = _SUFFIXES.get(t[-1:], 1)
    try:
        count = float(t[:-1] if scale > 1 else t) * scale
    except ValueError:
        raise ValueError(f"not a row count: {value!r} (use e.g. 1000000, 1e6 or 1M)") from None
    if count != int(count):
        raise ValueError(f"not a whole number of rows: {value!r}")
    return int(count)


class SynthConfig(BaseModel):
    """Everything that defines a synthetic dataset (the CLI options and the flow parameters)."""

    model_config = ConfigDict(extra="forbid")

    out: str = Field(description="Output folder: a local path or an fsspec URI (s3://bucket/prefix, memory://x).")
    rows: Annotated[int, BeforeValidator(_row_count)] = Field(gt=0, description="Number of rows to generate "
                                                               "(1000000, 1e6, 250k or 10M).")
    files: int = Field(1, ge=1, description="Number of part files the rows are split into.")
    gzip: bool = Field(False, description="Write gzip-compressed files (part-NNNNN.tsv.gz).")
    seed: int = Field(0, ge=0, description="Random seed: the same seed and rows give identical bytes.")
    label_rate: float = Field(0.25, gt=0, lt=1, description="Target share of positive labels.")
    signal: float = Field(1.25, gt=0, le=5, description="Std of the planted logit; larger means an easier task "
                                                        "(1.25 gives a best AUC near 0.77).")
    top_k: int = Field(64, ge=1, description="Most frequent values of a planted categorical column that get their "
                                             "own effect; rarer and missing values share one effect.")
    workers: int = Field(0, ge=0, description="Processes writing files in parallel (0: one per file up to the "
                                              "CPU count). Never changes the output.")


@dataclass
class Block:
    """Rows of one block: raw column values, missing masks, true probabilities and labels."""

    values: dict[str, np.ndarray]   # categorical: vocabulary ids; numerical: integer counts
    missing: dict[str, np.ndarray]
    probability: np.ndarray
    label: np.ndarray


@dataclass
class PlantedModel:
    """logit = bias + per-value categorical effects + numerical weights * log1p(max(x, 0)) + one pair term."""

    bias: float
    categorical: dict[str, np.ndarray]  # effects of ids 0..top_k-1, then the shared rare/missing effect
    numerical: dict[str, float]         # weight of log1p(max(x, 0)), missing counts as 0
    interaction: np.ndarray             # (K+1, K+1) effects of (INTERACTION[0], INTERACTION[1]) top-K ids

    def terms(self, values: dict[str, np.ndarray], missing: dict[str, np.ndarray]) -> np.ndarray:
        """The logit without the bias."""
        logit = np.zeros(next(iter(values.values())).shape[0])
        for name, effects in self.categorical.items():
            logit += effects[_bucket(values[name], missing[name], effects.shape[0] - 1)]
        for name, weight in self.numerical.items():
            logit += weight * _log_count(values[name], missing[name])
        a, b = (_bucket(values[n], missing[n], INTERACTION_K) for n in INTERACTION)
        return logit + self.interaction[a, b]

    def probability(self, values: dict[str, np.ndarray], missing: dict[str, np.ndarray]) -> np.ndarray:
        """The true click probability of each row."""
        return 1 / (1 + np.exp(-(self.bias + self.terms(values, missing))))

    def describe(self) -> dict:
        """A JSON-serialisable description (effects rounded for readability)."""
        return {
            "formula": "label ~ Bernoulli(sigmoid(bias + sum_c effect_c[bucket(C_c)] + sum_i w_i*log1p(max(I_i,0))"
                       " + pair[bucket(Ca), bucket(Cb)])); bucket = rank of the value among the top-K generated "
                       "values, rarer and missing values share the last bucket; missing counts are 0",
            "bias": round(self.bias, 6),
            "categorical": {n: {"top_k": int(e.shape[0] - 1), "effect_std": round(float(e.std()), 4)}
                            for n, e in self.categorical.items()},
            "numerical": {n: round(w, 6) for n, w in self.numerical.items()},
            "interaction": {"columns": list(INTERACTION), "top_k": INTERACTION_K,
                            "effect_std": round(float(self.interaction.std()), 4)},
        }


def _bucket(ids: np.ndarray, missing: np.ndarray, k: int) -> np.ndarray:
    return np.where(missing | (ids >= k), k, ids)


def _log_count(counts: np.ndarray, missing: np.ndarray) -> np.ndarray:
    return np.where(missing, 0.0, np.log1p(np.maximum(counts, 0)))


def _rng(seed: int, *key: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=key)))


class SyntheticData:
    """The generator for one (seed, rows, label_rate, signal, top_k): vocabularies, planted model, blocks."""

    def __init__(self, config: SynthConfig):
        self.config = config
        self.vocab = {c: sc.vocabulary_size(sc.CATEGORICAL[c], config.rows) for c in CRITEO_CATEGORICAL}
        salts = np.random.SeedSequence(config.seed, spawn_key=(3,)).generate_state(len(CRITEO_CATEGORICAL))
        self.salt = dict(zip(CRITEO_CATEGORICAL, salts.astype(np.uint32)))
        self.model = self._plant()

    def _columns(self, rng: np.random.Generator, n: int) -> tuple[dict, dict]:
        missing = sc.missing_masks(rng, n, [*CRITEO_NUMERICAL, *CRITEO_CATEGORICAL])
        latent = rng.standard_normal(n)
        values = {c: sc.sample_counts(rng, sc.NUMERICAL[c], latent) for c in CRITEO_NUMERICAL}
        values.update({c: sc.sample_ids(rng, sc.CATEGORICAL[c], self.vocab[c], n) for c in CRITEO_CATEGORICAL})
        return values, missing

    def _plant(self) -> PlantedModel:
        """Draw the effects, scale each term to its share of ``signal``**2, solve the bias for ``label_rate``."""
        cfg = self.config
        rng = _rng(cfg.seed, 1)
        values, missing = self._columns(_rng(cfg.seed, 2), CALIBRATION_ROWS)
        cat_share, num_share, pair_share = (cfg.signal**2 * s for s in VARIANCE_SHARES)
        categorical = {}
        for name in EFFECT_CATEGORICAL:
            effects = rng.standard_normal(cfg.top_k + 1)
            term = effects[_bucket(values[name], missing[name], cfg.top_k)]
            categorical[name] = effects * math.sqrt(cat_share / len(EFFECT_CATEGORICAL)) / max(term.std(), 1e-9)
        weights = rng.standard_normal(len(EFFECT_NUMERICAL))
        num_term = sum(w * _log_count(values[n], missing[n]) for w, n in zip(weights, EFFECT_NUMERICAL))
        weights *= math.sqrt(num_share) / num_term.std()
        pair = rng.standard_normal((INTERACTION_K + 1, INTERACTION_K + 1))
        a, b = (_bucket(values[n], missing[n], INTERACTION_K) for n in INTERACTION)
        pair *= math.sqrt(pair_share) / pair[a, b].std()
        model = PlantedModel(0.0, categorical, dict(zip(EFFECT_NUMERICAL, map(float, weights))), pair)
        terms = model.terms(values, missing)
        lo, hi = -30.0, 30.0
        for _ in range(100):
            model.bias = (lo + hi) / 2
            if np.mean(1 / (1 + np.exp(-(model.bias + terms)))) < cfg.label_rate:
                lo = model.bias
            else:
                hi = model.bias
        return model

    def block(self, index: int) -> Block:
        """Block ``index`` (rows index*BLOCK_ROWS ...): the same for a seed whatever else is asked."""
        n = min(BLOCK_ROWS, self.config.rows - index * BLOCK_ROWS)
        rng = _rng(self.config.seed, 0, index)
        values, missing = self._columns(rng, n)
        p = self.model.probability(values, missing)
        return Block(values, missing, p, rng.random(n) < p)

    def hex_ids(self, name: str, ids: np.ndarray) -> np.ndarray:
        """A bijective 32-bit mix of (id + per-column salt): distinct ids give distinct hashes."""
        x = ids.astype(np.uint32) + self.salt[name]
        x ^= x >> np.uint32(16)
        x *= np.uint32(0x7FEB352D)
        x ^= x >> np.uint32(15)
        x *= np.uint32(0x846CA68B)
        x ^= x >> np.uint32(16)
        return x

    def tsv(self, block: Block, start: int = 0, stop: int | None = None) -> bytes:
        """Rows ``start:stop`` of a block as Criteo TSV lines."""
        rows = slice(start, stop)
        columns = {"label": pl.Series(block.label[rows].astype(np.int8))}
        columns.update({c: _with_nulls(pl.Series(block.values[c][rows]), block.missing[c][rows])
                        for c in CRITEO_NUMERICAL})
        columns.update({c: _hex_strings(self.hex_ids(c, block.values[c][rows]), block.missing[c][rows])
                        for c in CRITEO_CATEGORICAL})
        buffer = io.BytesIO()
        pl.DataFrame(columns).write_csv(buffer, separator="\t", include_header=False, null_value="",
                                        quote_style="never", line_terminator="\n")
        return buffer.getvalue()


_HEX_PAIRS = np.frombuffer(b"".join(b"%02x" % i for i in range(256)), np.uint8).reshape(256, 2)


def _hex_strings(x: np.ndarray, missing: np.ndarray) -> pl.Series:
    """uint32 values -> 8-digit lowercase hex strings, null where missing."""
    chars = _HEX_PAIRS[x.astype(">u4").view(np.uint8)].reshape(-1, 8)
    return _with_nulls(pl.Series(chars.view("S8").ravel()).cast(pl.String), missing)


def _with_nulls(series: pl.Series, missing: np.ndarray) -> pl.Series:
    return series.set(pl.Series(missing), None) if missing.any() else series


def file_name(index: int, gzip: bool) -> str:
    """Name of part file ``index``."""
    return f"part-{index:05d}.tsv" + (".gz" if gzip else "")


def _file_rows(config: SynthConfig, index: int) -> tuple[int, int]:
    return index * config.rows // config.files, (index + 1) * config.rows // config.files


def _write_file(data: SyntheticData, index: int, progress: Callable[[int], None] | None = None):
    """Write part file ``index`` atomically; return its true probabilities and labels."""
    cfg = data.config
    fs, root = fsspec.core.url_to_fs(cfg.out)
    start, stop = _file_rows(cfg, index)
    path = f"{root}/{file_name(index, cfg.gzip)}"
    probs, labels = [], []
    with atomic_open(path, "wb", fs) as raw:
        out = gzip_module.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=GZIP_LEVEL, mtime=0) if cfg.gzip else raw
        for b in range(start // BLOCK_ROWS, -(-stop // BLOCK_ROWS)):
            block = data.block(b)
            lo, hi = max(start - b * BLOCK_ROWS, 0), min(stop - b * BLOCK_ROWS, BLOCK_ROWS)
            out.write(data.tsv(block, lo, hi))
            probs.append(block.probability[lo:hi])
            labels.append(block.label[lo:hi])
            if progress:
                progress(hi - lo)
        if cfg.gzip:
            out.close()
    return np.concatenate(probs), np.concatenate(labels)


def roc_auc(score: np.ndarray, label: np.ndarray) -> float:
    """Exact ROC AUC (ties count one half), via average ranks."""
    _, inverse, counts = np.unique(score, return_inverse=True, return_counts=True)
    avg_rank = np.cumsum(counts) - (counts - 1) / 2
    pos = int(label.sum())
    neg = label.shape[0] - pos
    if pos == 0 or neg == 0:
        return float("nan")  # undefined with a single class
    return float((avg_rank[inverse][label.astype(bool)].sum() - pos * (pos + 1) / 2) / (pos * neg))


def log_loss(p: np.ndarray, label: np.ndarray) -> float:
    """Mean binary cross-entropy of probabilities ``p``."""
    p = np.clip(p, 1e-15, 1 - 1e-15)
    return float(-np.mean(np.where(label, np.log(p), np.log1p(-p))))


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _prepare_output(config: SynthConfig):
    """Make the folder; remove an earlier run's files (ours by name) but refuse to touch anything else."""
    fs, root = fsspec.core.url_to_fs(config.out)
    fs.makedirs(root, exist_ok=True)
    names = [p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(root, detail=False)]
    foreign = [n for n in names if n != METADATA_FILE and not n.startswith("part-")]
    if foreign:
        raise UserError(f"{config.out}: output folder holds files that synth did not write ({', '.join(foreign[:3])}). "
                        "Fix: pass an empty or new folder as --out.")
    if METADATA_FILE in names:
        fs.rm(f"{root}/{METADATA_FILE}")
    for name in names:
        if name.startswith("part-"):
            fs.rm(f"{root}/{name}")
    return fs, root


def write(config: SynthConfig, progress: Callable[[int], None] | None = None) -> dict:
    """Generate the dataset described by ``config``; return (and write last) its metadata."""
    fs, root = _prepare_output(config)
    data = SyntheticData(config)
    workers = config.workers or min(config.files, os.cpu_count() or 1)
    if fs.protocol in ("memory", ("memory",)) or workers == 1 or config.files == 1:
        parts = [_write_file(data, i, progress) for i in range(config.files)]
    else:
        parts = []
        # spawn, not fork: polars' thread pool does not survive a fork
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            for part in pool.map(_write_file, [data] * config.files, range(config.files)):
                parts.append(part)
                if progress:
                    progress(len(part[1]))
    p = np.concatenate([part[0] for part in parts])
    y = np.concatenate([part[1] for part in parts])
    rate = float(y.mean())
    prior = -(rate * math.log(rate) + (1 - rate) * math.log(1 - rate)) if 0 < rate < 1 else float("nan")
    metadata = {
        "generator": "dlrmflow.preprocessing.synthetic",
        "generator_version": GENERATOR_VERSION,
        "format": "criteo-tsv",
        "seed": config.seed,
        "rows": config.rows,
        "files": [{"name": file_name(i, config.gzip), "rows": b - a}
                  for i, (a, b) in enumerate(_file_rows(config, i) for i in range(config.files))],
        "label_rate": rate,
        "best_auc": _finite(roc_auc(p, y)),
        "best_logloss": log_loss(p, y),
        "best_normalized_entropy": _finite(log_loss(p, y) / prior),
        "expected_label_rate": float(p.mean()),
        "vocabulary_sizes": {c: int(v) for c, v in data.vocab.items()},
        "planted_model": data.model.describe(),
        "config": config.model_dump(),
    }
    write_atomic(f"{root}/{METADATA_FILE}", json.dumps(metadata, indent=2), fs)
    return metadata


def generate(out: str, rows: int, files: int = 1, gzip: bool = False, seed: int = 0, **options) -> dict:
    """Write ``rows`` synthetic Criteo rows under ``out``; return the metadata (see ``SynthConfig``)."""
    try:
        config = SynthConfig(out=out, rows=rows, files=files, gzip=gzip, seed=seed, **options)
    except ValidationError as e:
        raise UserError(f"invalid synth options: {e}") from None
    return write(config)
