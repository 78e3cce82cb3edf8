"""Raw rows in: a bundle's ``raw.pt2``, a torch.export program that takes a row's values as the input spec reads
them and does inside what preprocessing did before the model (``RawDLRM``; written by ``write_raw``).

Inputs (``RAW_INPUTS``): ``values`` int64 [N], every categorical's keys feature by feature, row by row (an integer
id as it is, a hex id as its 32-bit integer, a string as the client's ``raw_client.string_key``: blake2b, 64 bits);
``lengths`` int64 [n_cat * B], each row's number of keys per feature (feature-major; a one-hot feature: 1);
``missing`` bool [N], a key that is missing; ``numerical`` float64 [B, n_num], NaN where missing. Inside:

- numericals: the spec's transform (``log1p(max(x, 0))``, ``log(x + 3)`` above -3 else 0, identity), missing -> 0,
  rounded through float32 and the dataset's numerical dtype (float16: what the dataset stored and training read);
- vocabulary features: a sorted-key lookup (``torch.searchsorted``) of every kept (feature, key) pair, mixed into
  one 64-bit number (``pair_key``: splitmix64 of key + feature * an odd constant, so a key's pairs of two features
  never mix alike); the entry found must hold the key itself too, so the lookup is exact (a pair that is not kept
  finds no entry or another key's); not found: index 0. The vocabularies hold only the values the frequency
  threshold kept, so the threshold applies as in preprocessing; a string vocabulary's keys are its values'
  ``string_key``;
- hashed features: ``1 + h mod (buckets - 1)`` with ``h`` splitmix64 of an integer key (hex ids: of their 32-bit
  value) or a string's key itself; missing -> 0;
- lists: a row keeps its first ``max_hotness`` values; a missing list of a fixed hotness N pools N index-0 rows, as
  preprocessing writes it; then the model (``inference.StaticDLRM.pooled``: ids modulo a capped table's rows,
  pooling, MLPs, calibration, sigmoid).

training never imports preprocessing (docs/architecture.md), so splitmix64's constants and the transforms are
written here once more; tests/training/test_export_pt2.py pins them equal to preprocessing's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

import feature_spec as fspec
from training import raw_client
from training.inference import DLRMInference, StaticDLRM

RAW_PROGRAM, RAW_CONFIG, CLIENT = "raw.pt2", raw_client.CONFIG, "client.py"
RAW_INPUTS = {"values": ["int64", "N"], "lengths": ["int64", "n_cat * B"], "missing": ["bool", "N"],
              "numerical": ["float64", "n_num"]}
# preprocessing.hashing.splitmix64's constants (golden ratio, the two multipliers), as int64 bit patterns
GOLDEN, MIX1, MIX2 = (c - (1 << 64) for c in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB))
PAIR = 0xD6E8FEB86659FD93 - (1 << 64)   # odd: key + feature * PAIR differs for every feature of one key
TRANSFORMS = {"log1p": 0, "log3p": 1, "identity": 2}   # feature_spec.model.TRANSFORMS, each a code of ``numerical``
_TEXT = ("csv", "tsv", "criteo")   # input formats whose categoricals are text (a dtype-less one is a string)


class Unsupported(ValueError):
    """A bundle whose raw rows the program cannot encode (its manifest says why; its model.pt2 is unaffected)."""


def splitmix64(x: torch.Tensor) -> torch.Tensor:
    """preprocessing.hashing.splitmix64 on int64 tensors holding uint64 bits (int64 products wrap as uint64's do)."""
    z = x + GOLDEN
    z = (z ^ _shifted(z, 30)) * MIX1
    z = (z ^ _shifted(z, 27)) * MIX2
    return z ^ _shifted(z, 31)


def _shifted(z: torch.Tensor, k: int) -> torch.Tensor:
    """A logical right shift of uint64 bits held in int64 (torch's >> is arithmetic)."""
    return (z >> k) & ((1 << (64 - k)) - 1)


def _take(t: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    """``t[i]`` along the first dimension by index_select (aten::index is 3-20x slower, measured on 100k ids)."""
    return torch.index_select(t, 0, i)


def pair_key(keys: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """One int64 of each (key, feature) pair: splitmix64 (a bijection) of ``key + feature * PAIR``."""
    return splitmix64(keys + features * PAIR)


class RawDLRM(nn.Module):
    """``model`` (a ``StaticDLRM``) behind the raw-row encoding of ``plan`` (``raw_plan``; see the module doc)."""

    def __init__(self, model: StaticDLRM, plan: dict[str, Any], keys: dict[str, tuple[np.ndarray, np.ndarray]]):
        super().__init__()
        self.model = model
        cats, nums = plan["categorical"], plan["numerical"]
        self.dtype = getattr(torch, plan["numerical_dtype"])
        self.register_buffer("transform", torch.tensor([TRANSFORMS[n["transform"]] for n in nums], dtype=torch.int64))
        hashed = [c.get("buckets") is not None for c in cats]
        self.hashes, self.looks_up = any(hashed), not all(hashed)
        self.register_buffer("hashed", torch.tensor(hashed))
        self.register_buffer("mix", torch.tensor([c["key"] != "string" for c in cats]))   # integer keys: splitmix64
        modulus = [c["buckets"] - 1 if c.get("buckets") else 1 for c in cats]
        self.register_buffer("modulus", torch.tensor(modulus, dtype=torch.int64))
        self.register_buffer("wrap", torch.tensor([(1 << 64) % m for m in modulus], dtype=torch.int64))
        big = 1 << 62
        self.truncates = any(c.get("max_hotness") for c in cats)
        self.register_buffer("cap", torch.tensor([c.get("max_hotness") or big for c in cats], dtype=torch.int64))
        self.register_buffer("fill", torch.tensor([c["hotness"] or 0 for c in cats], dtype=torch.int64))
        mixed, entries = _sorted_pairs([keys.get(c["name"]) for c in cats])
        self.register_buffer("mixed", mixed)       # [K] sorted
        self.register_buffer("entries", entries)   # [K, 2]: each mixed entry's key and index

    def forward(self, values: torch.Tensor, lengths: torch.Tensor, missing: torch.Tensor,
                numerical: torch.Tensor) -> torch.Tensor:
        model, n = self.model, self.fill.shape[0]
        batch, n_values = numerical.shape[0], values.shape[0]
        lengths = lengths.to(torch.int64).reshape(-1)
        offsets, table = model.layout(lengths, n_values, batch)
        ids = self.indices(values.to(torch.int64), table, missing.to(torch.bool))
        bag_table = torch.arange(n * batch, device=lengths.device) // batch
        weights, kept = None, lengths
        if self.truncates:   # a row keeps its first max_hotness values
            position = torch.arange(n_values, device=values.device)
            position = position - _take(offsets, torch.searchsorted(offsets[1:], position, right=True))
            weights = (position < _take(self.cap, table)).to(torch.float32)
            kept = torch.minimum(lengths, _take(self.cap, bag_table))
        fill = torch.where(lengths == 0, _take(self.fill, bag_table), 0)
        return model.pooled(ids, table, offsets, kept + fill, model.dense(self.numericals(numerical)), weights, fill)

    def indices(self, values: torch.Tensor, table: torch.Tensor, missing: torch.Tensor) -> torch.Tensor:
        """Each key's vocabulary or hash-bucket index (0: missing, unseen or rare)."""
        out = torch.zeros_like(values)
        if self.looks_up:
            # the queries sorted first: their binary searches share paths, in cache (4-5x faster than unsorted)
            mixed, order = torch.sort(pair_key(values, table))
            at = torch.searchsorted(self.mixed, mixed).clamp(max=self.mixed.shape[0] - 1)
            entry = _take(self.entries, at)   # one gather: the key and index side by side
            hit = (_take(self.mixed, at) == mixed) & (entry[:, 0] == _take(values, order))
            out = out.scatter(0, order, torch.where(hit, entry[:, 1], 0))
        if self.hashes:
            h = torch.where(_take(self.mix, table), splitmix64(values), values)
            m = _take(self.modulus, table)
            r = torch.remainder(h, m)   # h as uint64: a negative int64 is h + 2^64
            r = torch.where(h < 0, torch.remainder(r + _take(self.wrap, table), m), r)
            out = torch.where(_take(self.hashed, table), r + 1, out)
        return torch.where(missing, 0, out)

    def numericals(self, numerical: torch.Tensor) -> torch.Tensor:
        """The transformed numericals [B, n_num] float32, as the dataset stored them (its dtype) and training read
        them (preprocessing.transforms: a NaN is missing; missing -> 0 after the transform)."""
        x = numerical.to(torch.float64)
        gone = torch.isnan(x)
        log1p = x.clamp(min=0).log1p()
        log3p = torch.where(x > -3, (x + 3).log(), 0.0)
        code = self.transform.unsqueeze(0)
        y = torch.where(code == 0, log1p, torch.where(code == 1, log3p, x))
        return torch.where(gone, 0.0, y).to(torch.float32).to(self.dtype).to(torch.float32)


def _static(module: DLRMInference) -> StaticDLRM:
    """``module``'s ``StaticDLRM`` in eval mode (``module`` itself when it is one already: a quantized one)."""
    return (module if isinstance(module, StaticDLRM) else StaticDLRM(module)).eval()


def _sorted_pairs(keys: list[tuple[np.ndarray, np.ndarray] | None]) -> tuple[torch.Tensor, torch.Tensor]:
    """(every vocabulary feature's kept (key, feature) pairs as ``pair_key``, sorted; their [key, index] rows in that
    order) of each feature's (kept keys, their indices); None: a feature without a vocabulary. Unsupported when two
    pairs mix alike (a 64-bit collision: about K^2 / 2^65)."""
    present = [(f, k, i) for f, entry in enumerate(keys) if entry is not None for k, i in [entry] if len(k)]
    if not present:   # an entry no pair finds: its key is looked up only where the mixed key matches
        return torch.full((1,), 0, dtype=torch.int64), torch.tensor([[0, 0]], dtype=torch.int64)
    key = torch.from_numpy(np.concatenate([k for _, k, _ in present]).astype(np.int64))
    index = torch.from_numpy(np.concatenate([i for _, _, i in present]).astype(np.int64))
    feature = torch.cat([torch.full((len(k),), f, dtype=torch.int64) for f, k, _ in present])
    mixed, order = torch.sort(pair_key(key, feature), stable=True)
    if len(mixed) > 1 and bool((mixed[1:] == mixed[:-1]).any()):
        raise Unsupported("two kept (feature, value) pairs mix to the same 64-bit key")
    return mixed, torch.stack((key[order], index[order]), dim=1).contiguous()


def raw_plan(folder: Path, config: dict[str, Any], input_spec: fspec.FeatureSpec
             ) -> tuple[dict[str, Any], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """What the raw program and its client need (``raw.json``: the features' keys, hotness, buckets, transforms;
    the numerical dtype, the null values) and each vocabulary feature's (sorted keys, their indices), from a
    bundle's ``folder`` (its feature_spec.yaml and vocab/) and the ``input_spec`` it was preprocessed with.
    Unsupported: a case the program does not encode (the reason)."""
    import polars as pl

    dataset = fspec.load(str(folder))
    settings = dataset.metadata.get("preprocessing") or {}
    chunks = [c for cs in input_spec.source_spec.values() for c in cs]
    kind = "criteo" if input_spec.metadata.get("name") == "criteo" else chunks[0].type if chunks else None
    extra = (chunks[0].model_extra or {}) if chunks else {}
    specs, cats, keys = input_spec.feature_spec, [], {}
    for name in config["categorical"]:
        f = specs[name]
        entry = {"name": name, "hotness": f.values_per_row, "max_hotness": f.max_hotness, "sep": f.sep}
        if f.hash_buckets is not None:
            if f.dtype is None and kind not in _TEXT:
                raise Unsupported(f"the hashed feature {name!r} has no dtype and its input's format is {kind!r}, so "
                                  "whether its values are integers or strings is not known; give it `dtype: int` or "
                                  "`dtype: str` in the input spec")
            key = {"hex": "hex", "int": "int"}.get(f.dtype or "", "string")
            cats.append({**entry, "key": key, "buckets": f.hash_buckets})
            continue
        relative = (dataset.metadata.get("vocab") or {}).get(name)
        vocab = pl.read_parquet(folder / relative)
        integer = vocab["value"].dtype.is_integer()
        key = "hex" if f.dtype == "hex" else "int" if integer else "string"
        raw = vocab["value"].to_numpy().astype(np.int64) if integer else \
            np.array([raw_client.string_key(v) for v in vocab["value"].to_list()], dtype=np.int64)
        order = np.argsort(raw, kind="stable")
        raw, index = raw[order], vocab["index"].to_numpy().astype(np.int64)[order]
        if len(raw) > 1 and (raw[1:] == raw[:-1]).any():
            raise Unsupported(f"two kept values of {name!r} have the same 64-bit key")   # a blake2b collision
        keys[name] = (raw, index)
        cats.append({**entry, "key": key, "kept": len(raw)})
    nums = [{"name": n, "transform": specs[n].transform or "log1p"} for n in config["numerical"]]
    unknown = {n["transform"] for n in nums} - set(TRANSFORMS)
    if unknown:
        raise Unsupported(f"numerical transform {sorted(unknown)[0]!r} is not one the raw program applies")
    plan = {"format": 1, "program": RAW_PROGRAM, "inputs": RAW_INPUTS, "output": "probability [B] float32",
            "numerical_dtype": settings.get("numerical_dtype", "float16"),
            "null_values": list(extra.get("null_values") or ()), "categorical": cats, "numerical": nums}
    return plan, keys


def export_raw(module: DLRMInference, plan: dict[str, Any], keys: dict[str, tuple[np.ndarray, np.ndarray]],
               sample: tuple[torch.Tensor, ...]) -> torch.export.ExportedProgram:
    """``RawDLRM`` of ``module`` as a torch.export program with a dynamic batch (1 or more rows) and number of keys,
    traced on ``sample`` (``sample_raw``: 2 or more rows and keys)."""
    raw = RawDLRM(_static(module), plan, keys).eval()
    batch, values = torch.export.Dim("batch", min=1), torch.export.Dim("values", min=0)
    shapes = ({0: values}, {0: len(plan["categorical"]) * batch}, {0: values}, {0: batch})
    with torch.inference_mode(False), torch.no_grad():
        return torch.export.export(raw, sample, dynamic_shapes=shapes, strict=False)


def sample_raw(plan: dict[str, Any], keys: dict[str, tuple[np.ndarray, np.ndarray]], rows: int,
               seed: int) -> tuple[torch.Tensor, ...]:
    """Random raw inputs of ``rows`` rows: keys kept by the vocabularies and unseen ones (negative too), missing
    keys and lists, lists longer than max_hotness, NaN and negative numericals."""
    g = np.random.default_rng(seed)
    values, lengths, missing = [], [], []
    for c in plan["categorical"]:
        kept = keys.get(c["name"], (np.zeros(0, np.int64), None))[0]
        for _ in range(rows):
            n = 1 if c["hotness"] == 1 else int(g.choice([0, c["hotness"]])) if c["hotness"] else \
                int(g.integers(0, (c["max_hotness"] or 3) + 3))
            for _ in range(n):
                values.append(int(g.choice(kept)) if len(kept) and g.random() < 0.6 else
                              int(g.integers(-(1 << 63), (1 << 63) - 1, dtype=np.int64)))
                missing.append(bool(g.random() < 0.1))
            lengths.append(n)
    numerical = g.normal(0, 20, (rows, len(plan["numerical"])))
    numerical[g.random(numerical.shape) < 0.1] = np.nan
    return (torch.tensor(values, dtype=torch.int64), torch.tensor(lengths, dtype=torch.int64),
            torch.tensor(missing, dtype=torch.bool), torch.from_numpy(numerical))


def write_raw(folder: Path, config: dict[str, Any], module: DLRMInference, input_spec: fspec.FeatureSpec | None,
              tolerance: float) -> dict[str, Any]:
    """Write ``raw.pt2``, ``raw.json`` and ``client.py`` (a copy of ``training/raw_client.py``) into the bundle's
    ``folder``; returns the manifest's ``raw`` entry: the files, inputs, the largest difference of the saved program
    from the eager ``RawDLRM`` on batches of 1, 7 and 33 rows (ValueError above ``tolerance``); or ``{"file": None,
    "why": ...}`` where the bundle has no input spec or a feature the program cannot encode (``Unsupported``)."""
    if input_spec is None:
        return {"file": None, "why": "the model's dataset records no input spec (it was not preprocessed from raw "
                                     "rows)"}
    try:
        plan, keys = raw_plan(folder, config, input_spec)
    except Unsupported as e:
        return {"file": None, "why": str(e)}
    program = export_raw(module, plan, keys, sample_raw(plan, keys, rows=8, seed=0))
    with open(folder / RAW_PROGRAM, "wb") as f:
        torch.export.save(program, f)
    (folder / RAW_CONFIG).write_text(json.dumps(plan, indent=2) + "\n")
    shutil.copyfile(Path(raw_client.__file__), folder / CLIENT)
    eager = RawDLRM(_static(module), plan, keys).eval()
    saved, diff = torch.export.load(str(folder / RAW_PROGRAM)).module(), 0.0
    with torch.no_grad():
        for seed, rows in enumerate((1, 7, 33), start=1):
            inputs = sample_raw(plan, keys, rows, seed)
            diff = max(diff, float((saved(*inputs) - eager(*inputs)).abs().max()))
    if diff > tolerance:
        raise ValueError(f"the saved raw program differs from the eager one by {diff} (a bug of the export)")
    return {"file": RAW_PROGRAM, "config": RAW_CONFIG, "client": CLIENT, "inputs": RAW_INPUTS,
            "output": "probability [B] float32", "max_abs_diff": diff}
