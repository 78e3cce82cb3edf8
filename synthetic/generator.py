"""Synthetic Criteo-format click logs with labels from a known (planted) model.

Rows look like the real Kaggle DAC ``train.txt`` (see ``synthetic.columns``); the label is
Bernoulli(sigmoid(logit)) of a planted model, so the best achievable ROC AUC and log loss
(those of the true probabilities) are known and recorded in ``_synth_metadata.json`` (a leading ``_``: folder inputs skip it).
Rows depend only on (seed, rows): they come in fixed blocks of ``BLOCK_ROWS`` rows with one
random stream per block, so neither ``files`` nor ``workers`` changes the bytes written.

Multi-hot (``multi_hot_sizes``, MLPerf DLRMv2-like): each categorical field holds N ids joined by ``|`` (N per
column); the first is the one-hot row's id (so the rows are the one-hot rows with more ids), the other N - 1 are
drawn from the same column's distribution in a stream of their own; a missing field stays empty (a missing
list). The planted term of a multi-hot column is the mean of its ids' effects (the pair term uses the first
ids). An input spec for ``dlrmflow preprocess --spec`` is written beside the data (``SPEC_FILE``).

Days (``days``, ``start``, ``rows_per_day``): one folder per date, ``<out>/<YYYY-MM-DD>/``, whose planted
model drifts with the date's index from ``EPOCH``. Each effect draw is a stationary AR(1) in the day
index (correlation ``exp(-drift)`` between consecutive days; the epoch's draws are the rows mode's),
and the long tail of every categorical column ages: each day new ids enter at its head, taking a
share ``drift`` of its rows, every id moves down and the oldest leave. The head (the ranks with their
own planted effect) keeps its ids. A day's bytes depend only on its date and ``DAY_IDENTITY``.
"""

from __future__ import annotations

import datetime as dt
import functools
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

import numpy as np
import polars as pl
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from common.atomic import atomic_open, write_atomic
from common.errors import UserError
from common.metrics import log_loss, roc_auc
from common.store import filesystem
from feature_spec.presets import CRITEO_CATEGORICAL, CRITEO_NUMERICAL
from synthetic import columns as sc

GENERATOR_VERSION = 2  # 2: fresh ids give large-N data the real share of values seen once
BLOCK_ROWS = 65_536
CALIBRATION_ROWS = 200_000
MULTI_HOT_CALIBRATION_ROWS = 50_000
METADATA_FILE = "_synth_metadata.json"
SPEC_FILE = "_synth_spec.yaml"   # multi-hot: the input spec of the rows (a leading ``_``: folder inputs skip it)
LIST_SEP = "|"
GZIP_LEVEL = 6
BEST_EPS = 1e-15   # the clip of the probabilities in the recorded best log loss

EFFECT_CATEGORICAL = ("C1", "C2", "C4", "C6", "C8", "C10", "C11", "C13", "C15", "C18", "C19", "C24", "C26")
EFFECT_NUMERICAL = ("I1", "I3", "I5", "I6", "I7", "I11", "I13")
INTERACTION = ("C14", "C17")
INTERACTION_K = 8
# shares of the planted logit's variance: categorical effects, numerical effects, interaction
VARIANCE_SHARES = (0.6, 0.25, 0.15)

EPOCH = dt.date(2026, 1, 1)  # day index 0 of the drift (earlier dates have negative indices)
DAY_FIELDS = ("days", "start", "rows_per_day", "drift")  # days mode only: left out of a rows-mode dump
# what a day's bytes depend on besides its date (recorded as the day's "config"; reuse compares it)
DAY_IDENTITY = ("seed", "rows_per_day", "files", "gzip", "label_rate", "signal", "top_k", "drift")


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


def _iso_date(value):
    """A ``YYYY-MM-DD`` text as a date, else the value unchanged."""
    if not isinstance(value, str):
        return value
    try:
        if len(value.strip()) != 10:
            raise ValueError
        return dt.date.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(f"not a date: {value!r}. Fix: write it as YYYY-MM-DD, e.g. 2026-11-01") from None


def _sizes(value):
    """Multi-hot sizes as given on the command line ("3,2,1", or several such values) as a list of ints."""
    if value is None or isinstance(value, int):
        return value if value is None else [value]
    if isinstance(value, str):
        value = [value]
    items = []
    for v in value:
        items += [p for p in str(v).replace(" ", "").split(",") if p] if isinstance(v, str) else [v]
    try:
        return [int(v) for v in items]
    except ValueError:
        raise ValueError(f"not a list of sizes: {value!r}. Fix: write e.g. 3,2,1,... (26 values, or one for all)") \
            from None


def _mode_error(message: str) -> PydanticCustomError:
    return PydanticCustomError("synth_mode", message)


class SynthConfig(BaseModel):
    """Everything that defines a synthetic dataset (the CLI options and the flow parameters): ``rows`` rows
    in ``out``, or ``days`` daily folders of ``rows_per_day`` rows from ``start`` (see ``write_days``)."""

    model_config = ConfigDict(extra="forbid")

    out: str = Field(description="Output folder: a local path or an fsspec URI (s3://bucket/prefix, memory://x).")
    rows: Annotated[int | None, BeforeValidator(_row_count)] = Field(
        None, gt=0, description="Number of rows to generate (1000000, 1e6, 250k or 10M); or use --days.")
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
    days: int | None = Field(None, ge=1, description="Write this many daily folders <out>/<YYYY-MM-DD>/ from "
                                                     "--start, with a planted model that drifts (instead of --rows).")
    start: Annotated[dt.date | None, BeforeValidator(_iso_date)] = Field(
        None, description="First date of --days (YYYY-MM-DD).")
    rows_per_day: Annotated[int | None, BeforeValidator(_row_count)] = Field(
        None, gt=0, description="Rows of each day with --days (1000000, 1e6, 250k or 10M).")
    drift: float = Field(0.05, ge=0, le=1, description="Day-to-day change with --days: consecutive days' planted "
                                                       "effects correlate by exp(-drift), and ids new each day take "
                                                       "this share of each column's long tail. 0: no drift.")
    multi_hot_sizes: Annotated[list[int] | None, BeforeValidator(_sizes)] = Field(
        None, description="Multi-hot rows: the ids per categorical field, C1..C26 (26 values, or one for all), e.g. "
                          "MLPerf's 3,2,1,2,6,1,1,1,1,7,3,8,1,6,9,5,1,1,1,12,100,27,10,3,1,1; fields joined by '|', "
                          "and an input spec written beside the data (_synth_spec.yaml).")

    @model_validator(mode="after")
    def _one_mode(self):
        if self.multi_hot_sizes is not None:
            sizes = self.multi_hot_sizes
            if len(sizes) not in (1, len(CRITEO_CATEGORICAL)) or min(sizes) < 1:
                raise _mode_error(f"--multi-hot-sizes needs 1 or {len(CRITEO_CATEGORICAL)} sizes >= 1 (got "
                                  f"{len(sizes)}: {sizes}). Fix: give one size per field C1..C26, or one for all")
            if self.days is not None:
                raise _mode_error("--multi-hot-sizes works with --rows only. Fix: drop --days or --multi-hot-sizes")
        if self.days is None:
            if self.rows is None:
                raise _mode_error("no size given. Fix: pass --rows N (one dataset), or --days D --start YYYY-MM-DD "
                                  "--rows-per-day N (daily folders)")
            given = " and ".join(f"--{f.replace('_', '-')}" for f in ("start", "rows_per_day")
                                 if getattr(self, f) is not None)
            if given:
                raise _mode_error(f"{given} without --days. Fix: add --days D, or drop {given}")
            return self
        if self.rows is not None:
            raise _mode_error("--rows and --days exclude each other. Fix: give each day's rows as --rows-per-day")
        if self.start is None:
            raise _mode_error("--days needs --start, the first date. Fix: add --start YYYY-MM-DD, e.g. 2026-11-01")
        if self.rows_per_day is None:
            raise _mode_error("--days needs --rows-per-day. Fix: add e.g. --rows-per-day 100k")
        return self

    @property
    def hotness(self) -> dict[str, int]:
        """Ids per categorical field (1 for all without ``multi_hot_sizes``)."""
        sizes = self.multi_hot_sizes or [1]
        return dict(zip(CRITEO_CATEGORICAL, sizes * len(CRITEO_CATEGORICAL) if len(sizes) == 1 else sizes))


@dataclass
class Block:
    """Rows of one block: raw column values, missing masks, true probabilities and labels."""

    values: dict[str, np.ndarray]   # categorical: vocabulary ids ([rows, N] when multi-hot); numerical: counts
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
            logit += _effect(effects, values[name], missing[name])
        for name, weight in self.numerical.items():
            logit += weight * _log_count(values[name], missing[name])
        a, b = (_bucket(_first(values[n]), missing[n], INTERACTION_K) for n in INTERACTION)
        return logit + self.interaction[a, b]

    def probability(self, values: dict[str, np.ndarray], missing: dict[str, np.ndarray]) -> np.ndarray:
        """The true click probability of each row."""
        return 1 / (1 + np.exp(-(self.bias + self.terms(values, missing))))

    def describe(self) -> dict:
        """A JSON-serialisable description (effects rounded for readability)."""
        return {
            "formula": "label ~ Bernoulli(sigmoid(bias + sum_c effect_c[bucket(C_c)] + sum_i w_i*log1p(max(I_i,0))"
                       " + pair[bucket(Ca), bucket(Cb)])); bucket = rank of the value among the top-K generated "
                       "values, rarer and missing values share the last bucket; missing counts are 0; a multi-hot "
                       "field's effect is the mean of its ids' effects, the pair uses each field's first id",
            "bias": round(self.bias, 6),
            "categorical": {n: {"top_k": int(e.shape[0] - 1), "effect_std": round(float(e.std()), 4)}
                            for n, e in self.categorical.items()},
            "numerical": {n: round(w, 6) for n, w in self.numerical.items()},
            "interaction": {"columns": list(INTERACTION), "top_k": INTERACTION_K,
                            "effect_std": round(float(self.interaction.std()), 4)},
        }


def _bucket(ids: np.ndarray, missing: np.ndarray, k: int) -> np.ndarray:
    return np.where(missing | (ids >= k), k, ids)


def _effect(effects: np.ndarray, ids: np.ndarray, missing: np.ndarray) -> np.ndarray:
    """A categorical's planted term per row: its id's effect, or the mean of a multi-hot row's ids' effects."""
    k = effects.shape[0] - 1
    if ids.ndim == 1:
        return effects[_bucket(ids, missing, k)]
    return effects[_bucket(ids, missing[:, None], k)].mean(axis=1)


def _first(ids: np.ndarray) -> np.ndarray:
    return ids if ids.ndim == 1 else ids[:, 0]


def _log_count(counts: np.ndarray, missing: np.ndarray) -> np.ndarray:
    return np.where(missing, 0.0, np.log1p(np.maximum(counts, 0)))


def _rng(seed: int, *key: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=key)))


def _columns(rng: np.random.Generator, n: int, shapes: dict[str, tuple[sc.CategoricalProfile, int]],
             aged: Callable[[str, np.ndarray], np.ndarray] = lambda name, ids: ids) -> tuple[dict, dict]:
    """``n`` rows of raw column values (categorical ids from ``shapes``, then ``aged``) and missing masks."""
    missing = sc.missing_masks(rng, n, [*CRITEO_NUMERICAL, *CRITEO_CATEGORICAL])
    latent = rng.standard_normal(n)
    values = {c: sc.sample_counts(rng, sc.NUMERICAL[c], latent) for c in CRITEO_NUMERICAL}
    values.update({c: aged(c, sc.sample_ids(rng, *shapes[c], n)) for c in CRITEO_CATEGORICAL})
    return values, missing


def _multi_hot(rng: np.random.Generator, values: dict, n: int, shapes: dict[str, tuple[sc.CategoricalProfile, int]],
               hotness: dict[str, int],
               aged: Callable[[str, np.ndarray], np.ndarray] = lambda name, ids: ids) -> dict:
    """``values`` with each multi-hot column's N - 1 further ids (from ``rng``) after its one-hot id: [n, N]."""
    out = dict(values)
    for c, size in hotness.items():
        if size > 1:
            more = aged(c, sc.sample_ids(rng, *shapes[c], n * (size - 1))).reshape(n, size - 1)
            out[c] = np.column_stack([values[c], more])
    return out


@functools.lru_cache(maxsize=4)
def _shapes(rows: int) -> dict[str, tuple[sc.CategoricalProfile, int]]:
    """Each categorical column's profile and vocabulary size fitted for ``rows`` rows (``sc.fit``)."""
    return {c: sc.fit(sc.CATEGORICAL[c], rows) for c in CRITEO_CATEGORICAL}


@functools.lru_cache(maxsize=1)
def _calibration(seed: int, rows: int, hotness: tuple[tuple[str, int], ...] = ()) -> tuple[dict, dict]:
    """The rows that calibrate the planted model: the same for every day of a seed and size (the days' id
    ageing moves only ids beyond the planted buckets), so made once for all of them; ``hotness``: multi-hot
    columns' sizes (their further ids come from a stream of their own)."""
    values, missing = _columns(_rng(seed, 2), CALIBRATION_ROWS, _shapes(rows))
    if hotness:   # the first rows only: MLPerf's sizes make ~240 ids a row
        n = MULTI_HOT_CALIBRATION_ROWS
        values, missing = {c: v[:n] for c, v in values.items()}, {c: m[:n] for c, m in missing.items()}
        values = _multi_hot(_rng(seed, 6), values, n, _shapes(rows), dict(hotness))
    return values, missing


def day_index(date: dt.date) -> int:
    """The drift's index of ``date``: days since ``EPOCH`` (negative before it)."""
    return (date - EPOCH).days


def _day_key(day: int) -> tuple[int, int]:
    """A random-stream key for a day index (stream keys are non-negative)."""
    return (0, day) if day >= 0 else (1, -day)


class SyntheticData:
    """The generator of one dataset, or with ``date`` of one day: vocabularies, planted model, blocks."""

    def __init__(self, config: SynthConfig, date: dt.date | None = None):
        self.config = config
        self.date = date
        self.rows = config.rows if date is None else config.rows_per_day
        self.out = config.out if date is None else day_folder(config.out, date)
        if self.rows is None:
            raise ValueError("a days config (days, start, rows_per_day) makes one day's data: pass its date")
        self.day = None if date is None else day_index(date)
        self.shapes = _shapes(self.rows)
        self.vocab = {c: v for c, (_, v) in self.shapes.items()}
        salts = np.random.SeedSequence(config.seed, spawn_key=(3,)).generate_state(len(CRITEO_CATEGORICAL))
        self.salt = dict(zip(CRITEO_CATEGORICAL, salts.astype(np.uint32)))
        self.head = max(config.top_k, INTERACTION_K)  # ranks with their own planted effect keep their ids
        drift = 0.0 if date is None else config.drift
        self.tail_step = {c: sc.tail_step(p, v, self.head, drift) for c, (p, v) in self.shapes.items()}
        self.model = self._plant(self._draws())

    def _aged(self, name: str, ids: np.ndarray) -> np.ndarray:
        """Ids of the tail (ranks >= head) on this day: rank r shows the id of rank r - step * day at the
        epoch, so each day ``step`` new ids enter at the head of the tail and the oldest leave."""
        step = self.tail_step[name]
        if not step or not self.day:
            return ids
        shifted = self.head + np.mod(ids - self.head - step * self.day, sc.MAX_VOCAB - self.head)
        return np.where(ids >= self.head, shifted, ids)

    def _columns(self, rng: np.random.Generator, n: int) -> tuple[dict, dict]:
        return _columns(rng, n, self.shapes, self._aged)

    def _multi_hot_key(self) -> tuple[tuple[str, int], ...]:
        return tuple((c, n) for c, n in self.config.hotness.items() if n > 1)

    def _draws(self) -> np.ndarray:
        """The planted model's standard-normal draws: the seed's own at the epoch (and in rows mode), moved by
        a stationary AR(1) with correlation exp(-drift) per day for other days (backwards before the epoch)."""
        cfg = self.config
        size = len(EFFECT_CATEGORICAL) * (cfg.top_k + 1) + len(EFFECT_NUMERICAL) + (INTERACTION_K + 1) ** 2
        z = _rng(cfg.seed, 1).standard_normal(size)
        if not self.day or cfg.drift == 0:
            return z
        rho = math.exp(-cfg.drift)
        direction = _day_key(self.day)[0]
        for step in range(1, abs(self.day) + 1):
            z = rho * z + math.sqrt(1 - rho**2) * _rng(cfg.seed, 4, direction, step).standard_normal(size)
        return z

    def _plant(self, draws: np.ndarray) -> PlantedModel:
        """Effects from ``draws``, each term scaled to its share of ``signal``**2, the bias solved for ``label_rate``."""
        cfg = self.config
        values, missing = _calibration(cfg.seed, self.rows, self._multi_hot_key())
        cat_share, num_share, pair_share = (cfg.signal**2 * s for s in VARIANCE_SHARES)
        n_cat, n_num = len(EFFECT_CATEGORICAL) * (cfg.top_k + 1), len(EFFECT_NUMERICAL)
        categorical = {}
        for name, effects in zip(EFFECT_CATEGORICAL, draws[:n_cat].reshape(len(EFFECT_CATEGORICAL), -1)):
            term = _effect(effects, values[name], missing[name])
            categorical[name] = effects * math.sqrt(cat_share / len(EFFECT_CATEGORICAL)) / max(term.std(), 1e-9)
        weights = draws[n_cat:n_cat + n_num].copy()
        num_term = sum(w * _log_count(values[n], missing[n]) for w, n in zip(weights, EFFECT_NUMERICAL))
        weights *= math.sqrt(num_share) / num_term.std()
        pair = draws[n_cat + n_num:].reshape(INTERACTION_K + 1, INTERACTION_K + 1).copy()
        a, b = (_bucket(_first(values[n]), missing[n], INTERACTION_K) for n in INTERACTION)
        pair *= math.sqrt(pair_share) / pair[a, b].std()
        model = PlantedModel(0.0, categorical, dict(zip(EFFECT_NUMERICAL, map(float, weights))), pair)
        terms = model.terms(values, missing)
        lo, hi = -30.0, 30.0
        for _ in range(100):
            model.bias = (lo + hi) / 2
            if model.bias in (lo, hi):   # lo and hi are adjacent floats: every later step gives this bias again
                break
            if np.mean(1 / (1 + np.exp(-(model.bias + terms)))) < cfg.label_rate:
                lo = model.bias
            else:
                hi = model.bias
        return model

    def block(self, index: int) -> Block:
        """Block ``index`` (rows index*BLOCK_ROWS ...): the same for a seed (and date) whatever else is asked."""
        n = min(BLOCK_ROWS, self.rows - index * BLOCK_ROWS)
        rng = _rng(self.config.seed, 0, index) if self.day is None else \
            _rng(self.config.seed, 0, index, *_day_key(self.day))
        values, missing = self._columns(rng, n)
        if self._multi_hot_key():   # a stream of their own: the one-hot draws (and labels' stream) stay as they are
            values = _multi_hot(_rng(self.config.seed, 5, index), values, n, self.shapes, self.config.hotness,
                                self._aged)
        p = self.model.probability(values, missing)
        return Block(values, missing, p, rng.random(n) < p)

    def identity(self) -> dict:
        """The config as recorded in the metadata: all of it for rows, ``DAY_IDENTITY`` for a day."""
        if self.date is None:
            one_hot = {"multi_hot_sizes"} if self.config.multi_hot_sizes is None else set()
            return self.config.model_dump(exclude=set(DAY_FIELDS) | one_hot)
        dump = self.config.model_dump(mode="json")
        return {k: dump[k] for k in DAY_IDENTITY}

    def drift_state(self) -> dict:
        """Where the day's drift stands (recorded in its metadata)."""
        return {"epoch": EPOCH.isoformat(), "day_index": self.day, "drift": self.config.drift,
                "effect_correlation_per_day": math.exp(-self.config.drift),
                "tail_head": self.head, "tail_new_ids_per_day": {c: s for c, s in self.tail_step.items() if s}}

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
    """uint32 values -> 8-digit lowercase hex strings, null where missing; [rows, N] values -> N hex ids a row
    joined by ``LIST_SEP``."""
    if x.ndim == 2:
        n, size = x.shape
        buf = np.full((n, size, 9), ord(LIST_SEP), np.uint8)
        buf[:, :, :8] = _HEX_PAIRS[x.astype(">u4").view(np.uint8)].reshape(n, size, 8)
        joined = np.ascontiguousarray(buf.reshape(n, size * 9)[:, :-1])
        return _with_nulls(pl.Series(joined.view(f"S{size * 9 - 1}").ravel()).cast(pl.String), missing)
    chars = _HEX_PAIRS[x.astype(">u4").view(np.uint8)].reshape(-1, 8)
    return _with_nulls(pl.Series(chars.view("S8").ravel()).cast(pl.String), missing)


def _with_nulls(series: pl.Series, missing: np.ndarray) -> pl.Series:
    return series.set(pl.Series(missing), None) if missing.any() else series


def file_name(index: int, gzip: bool) -> str:
    """Name of part file ``index``."""
    return f"part-{index:05d}.tsv" + (".gz" if gzip else "")


def _file_rows(rows: int, files: int, index: int) -> tuple[int, int]:
    return index * rows // files, (index + 1) * rows // files


def _write_file(data: SyntheticData, index: int, progress: Callable[[int], None] | None = None):
    """Write part file ``index`` atomically; return its true probabilities and labels."""
    cfg = data.config
    fs, root = filesystem(data.out)
    start, stop = _file_rows(data.rows, cfg.files, index)
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


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _prepare_output(out: str):
    """Make the folder; remove an earlier run's files (ours by name) but refuse to touch anything else."""
    fs, root = filesystem(out)
    fs.makedirs(root, exist_ok=True)
    names = [p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(root, detail=False)]
    foreign = [n for n in names if n not in (METADATA_FILE, SPEC_FILE) and not n.startswith("part-")]
    if foreign:
        raise UserError(f"{out}: output folder holds files that synth did not write ({', '.join(foreign[:3])}). "
                        "Fix: pass an empty or new folder as --out.")
    for name in (METADATA_FILE, SPEC_FILE):
        if name in names:
            fs.rm(f"{root}/{name}")
    for name in names:
        if name.startswith("part-"):
            fs.rm(f"{root}/{name}")
    return fs, root


def _pool(config: SynthConfig) -> ProcessPoolExecutor | None:
    """The processes that write part files in parallel; None where files are written in this process."""
    workers = config.workers or min(config.files, os.cpu_count() or 1)
    fs, _ = filesystem(config.out)
    if fs.protocol in ("memory", ("memory",)) or workers == 1 or config.files == 1:
        return None
    # spawn, not fork: polars' thread pool does not survive a fork
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))


def _write_data(data: SyntheticData, pool: ProcessPoolExecutor | None,
                progress: Callable[[int], None] | None) -> dict:
    """Write ``data``'s part files, then its metadata (last); return the metadata."""
    cfg = data.config
    fs, root = _prepare_output(data.out)
    if pool is None:
        parts = [_write_file(data, i, progress) for i in range(cfg.files)]
    else:
        parts = []
        for part in pool.map(_write_file, [data] * cfg.files, range(cfg.files)):
            parts.append(part)
            if progress:
                progress(len(part[1]))
    p = np.concatenate([part[0] for part in parts])
    y = np.concatenate([part[1] for part in parts])
    rate = float(y.mean())
    prior = -(rate * math.log(rate) + (1 - rate) * math.log(1 - rate)) if 0 < rate < 1 else float("nan")
    # the generator's name as recorded since version 1 (its module is synthetic.generator now)
    metadata = {"generator": "dlrmflow.preprocessing.synthetic", "generator_version": GENERATOR_VERSION,
                "format": "criteo-tsv"}
    if cfg.multi_hot_sizes is not None:
        metadata.update(format="criteo-tsv-multi-hot", multi_hot_sizes=cfg.hotness, spec=SPEC_FILE)
        write_atomic(f"{root}/{SPEC_FILE}", multi_hot_spec(cfg.hotness), fs)
    if data.date is not None:
        metadata["date"] = data.date.isoformat()
    metadata.update({
        "seed": cfg.seed,
        "rows": data.rows,
        "files": [{"name": file_name(i, cfg.gzip), "rows": b - a}
                  for i, (a, b) in enumerate(_file_rows(data.rows, cfg.files, i) for i in range(cfg.files))],
        "label_rate": rate,
        "best_auc": _finite(roc_auc(p, y)),
        "best_logloss": log_loss(p, y, BEST_EPS),
        "best_normalized_entropy": _finite(log_loss(p, y, BEST_EPS) / prior),
        "expected_label_rate": float(p.mean()),
        "vocabulary_sizes": {c: int(v) for c, v in data.vocab.items()},
        "fresh_id_shares": {c: prof.fresh for c, (prof, _) in data.shapes.items() if prof.fresh},
        "planted_model": data.model.describe(),
    })
    if data.date is not None:
        metadata["drift"] = data.drift_state()
    metadata["config"] = data.identity()
    write_atomic(f"{root}/{METADATA_FILE}", json.dumps(metadata, indent=2), fs)
    return metadata


def multi_hot_spec(hotness: dict[str, int]) -> str:
    """The input spec (YAML) of multi-hot rows: the Criteo columns as TSV, a field of N > 1 ids a hex list
    (``hotness: N``, ``sep: "|"``, ``pooling: mean``: the planted term of a list is the mean of its ids' effects).
    No files: pass the data folder as the input."""
    import yaml

    features = {"label": {}, **{n: {} for n in CRITEO_NUMERICAL}}
    features |= {c: {"dtype": "hex", **({"hotness": n, "sep": LIST_SEP, "pooling": "mean"} if n > 1 else {})} for c, n in hotness.items()}
    spec = {"feature_spec": features,
            "channel_spec": {"label": ["label"], "numerical": list(CRITEO_NUMERICAL),
                             "categorical": list(CRITEO_CATEGORICAL)},
            "metadata": {"name": "synthetic-multi-hot"}}
    return "# written by `dlrmflow synth --multi-hot-sizes`: dlrmflow preprocess --input <this folder> --spec " \
        "<this file>\n" + yaml.safe_dump(spec, sort_keys=False)


def write(config: SynthConfig, progress: Callable[[int], None] | None = None) -> dict:
    """Generate the ``rows`` dataset described by ``config``; return (and write last) its metadata.
    For a days config see ``write_days``."""
    if config.days is not None:
        raise ValueError("a days config (days, start, rows_per_day) is written by write_days")
    pool = _pool(config)
    try:
        return _write_data(SyntheticData(config), pool, progress)
    finally:
        if pool is not None:
            pool.shutdown()


def day_folder(out: str, date: dt.date | str) -> str:
    """The folder of one day: ``<out>/<YYYY-MM-DD>``."""
    return f"{out.rstrip('/')}/{_iso_date(date).isoformat()}"


def day_dates(config: SynthConfig) -> list[dt.date]:
    """The dates a days config writes: ``days`` consecutive days from ``start``."""
    return [config.start + dt.timedelta(days=i) for i in range(config.days)]


def read_day(config: SynthConfig, date: dt.date) -> dict | None:
    """The metadata of ``date``'s folder when it is complete and was written with ``config``'s day settings
    (``DAY_IDENTITY``) by this generator version, else None."""
    fs, root = filesystem(day_folder(config.out, date))
    try:
        metadata = json.loads(fs.cat_file(f"{root}/{METADATA_FILE}"))
    except (FileNotFoundError, ValueError):  # absent, or not ours: the day is written again
        return None
    dump = config.model_dump(mode="json")
    if (metadata.get("generator_version") != GENERATOR_VERSION or metadata.get("date") != date.isoformat()
            or metadata.get("config") != {k: dump[k] for k in DAY_IDENTITY}):
        return None
    if not all(fs.exists(f"{root}/{f['name']}") for f in metadata.get("files", [])):
        return None
    return metadata


def write_days(config: SynthConfig, progress: Callable[[int], None] | None = None) -> list[dict]:
    """Write the folder of each of ``config``'s days (``day_folder``), its metadata last; a day whose folder is
    already complete for these settings (``read_day``) is kept as it is. Return each day's metadata."""
    if config.days is None:
        raise ValueError("a rows config is written by write")
    pool = _pool(config)
    try:
        metadata = []
        for date in day_dates(config):
            done = read_day(config, date)
            if done is None:
                done = _write_data(SyntheticData(config, date), pool, progress)
            elif progress:
                progress(done["rows"])
            metadata.append(done)
        return metadata
    finally:
        if pool is not None:
            pool.shutdown()


def _config(**options) -> SynthConfig:
    try:
        return SynthConfig(**options)
    except ValidationError as e:
        raise UserError(f"invalid synth options: {e}") from None


def generate(out: str, rows: int, files: int = 1, gzip: bool = False, seed: int = 0, **options) -> dict:
    """Write ``rows`` synthetic Criteo rows under ``out``; return the metadata (see ``SynthConfig``)."""
    return write(_config(out=out, rows=rows, files=files, gzip=gzip, seed=seed, **options))


def generate_days(out: str, start: dt.date | str, days: int, rows_per_day: int, files: int = 1,
                  gzip: bool = False, seed: int = 0, **options) -> list[dict]:
    """Write ``days`` daily folders of ``rows_per_day`` rows from ``start`` under ``out``; return each
    day's metadata (see ``SynthConfig``, ``write_days``)."""
    return write_days(_config(out=out, start=start, days=days, rows_per_day=rows_per_day, files=files,
                              gzip=gzip, seed=seed, **options))
