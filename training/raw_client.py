"""The reference client of a serving bundle's raw program (``raw.pt2``): rows as the bundle's input spec reads them
-> the program's inputs. Every bundle holds a copy as ``client.py``; pure Python (json, hashlib, math; torch only in
``tensors``), it imports nothing of dlrmflow::

    import torch, client                      # the bundle's folder on sys.path
    c = client.Client("BUNDLE")
    program = torch.export.load("BUNDLE/raw.pt2").module()
    p = program(*c.tensors(rows))             # rows: dicts {column: value}; p: probabilities [B]

A row's value is what the input spec's reader gives: a text field (CSV, TSV, Criteo: a str; a list feature's field is
split at its ``sep``) or a typed value (Parquet: int, float, str, a list for a list column). None, an empty field and
the spec's ``null_values`` are missing. The client only parses: numericals to float (NaN: missing), integer ids to
int, hex ids to their 32-bit integer, string values to ``string_key`` (a stable 64-bit hash), and lays the
categoricals out feature by feature (``values``, ``lengths``, ``missing``). Everything else happens in the program,
as preprocessing did it: numerical transforms, vocabulary lookup (unseen and rare values: index 0), hash buckets,
truncation at ``max_hotness``, missing lists. A row that preprocessing would skip as a bad row (a hex id that is not
hex, an id that is not an integer, a fixed-hotness list of another length) is a ``BadRow`` here.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path

CONFIG = "raw.json"   # beside this file in a bundle: the features as the program takes them
_HEX = re.compile(r"[0-9a-fA-F]+")
_INT = re.compile(r"[+-]?[0-9]+")


class BadRow(ValueError):
    """A row preprocessing would not encode (it skips it as a bad row): not sent to the program."""


def string_key(value: str) -> int:
    """The 64-bit key of a string value: blake2b (8-byte digest) of its UTF-8 bytes read little-endian (what
    preprocessing hashes strings with), as a signed int64 (two's complement)."""
    u = int.from_bytes(hashlib.blake2b(value.encode(), digest_size=8).digest(), "little")
    return u - (1 << 64) if u >= 1 << 63 else u


class Client:
    """The inputs of a bundle's raw program for rows (``raw.json`` in ``bundle`` says the features)."""

    def __init__(self, bundle: str | Path):
        self.config = json.loads((Path(bundle) / CONFIG).read_text())
        self.nulls = set(self.config.get("null_values") or ())

    def encode(self, rows) -> tuple[list[int], list[int], list[bool], list[list[float]]]:
        """``(values, lengths, missing, numerical)`` of ``rows`` as lists: every categorical's keys, feature by
        feature and row by row; each row's number of them per feature (feature-major, ``n_cat * B``); which keys are
        missing; the numericals (``B x n_num``, NaN: missing)."""
        rows = list(rows)
        values: list[int] = []
        lengths: list[int] = []
        missing: list[bool] = []
        for f in self.config["categorical"]:
            for row in rows:
                elements = self._elements(f, row.get(f["name"]))
                lengths.append(len(elements))
                missing.extend(e is None for e in elements)
                values.extend(0 if e is None else e for e in elements)
        numerical = [[self._number(row.get(n["name"]), n["name"]) for n in self.config["numerical"]] for row in rows]
        return values, lengths, missing, numerical

    def tensors(self, rows) -> tuple:
        """``encode(rows)`` as the program's input tensors: values int64 [N], lengths int64 [n_cat * B], missing
        bool [N], numerical float64 [B, n_num]."""
        import torch

        values, lengths, missing, numerical = self.encode(rows)
        return (torch.tensor(values, dtype=torch.int64), torch.tensor(lengths, dtype=torch.int64),
                torch.tensor(missing, dtype=torch.bool),
                torch.tensor(numerical, dtype=torch.float64).reshape(len(numerical), len(self.config["numerical"])))

    def _missing(self, value) -> bool:
        return value is None or (isinstance(value, str) and (value == "" or value in self.nulls)) or \
            (isinstance(value, float) and math.isnan(value))

    def _number(self, value, name: str) -> float:
        if self._missing(value):
            return math.nan
        try:
            return float(value)
        except ValueError:
            raise BadRow(f"numerical {name!r}: {value!r} is not a number") from None

    def _elements(self, f: dict, value) -> list:
        """A feature's keys in a row (None: a missing key). A one-hot feature has one (missing or not); a list
        feature its elements (none: a missing list)."""
        if f["hotness"] == 1:
            return [None if self._missing(value) else self._key(f, value)]
        if self._missing(value):
            return []
        items = value.split(f["sep"] or "\0") if isinstance(value, str) else list(value)
        keys = [None if self._missing(v) or (isinstance(v, str) and not v.strip()) else self._key(f, v)
                for v in items]
        if f["hotness"] is not None and len(keys) != f["hotness"]:
            raise BadRow(f"{f['name']!r}: {len(keys)} values, not hotness {f['hotness']}")
        return keys

    def _key(self, f: dict, value) -> int:
        """The key of one value: as preprocessing parses it (hex ids are not stripped; a list's int elements are)."""
        if f["key"] == "string":
            return string_key(str(value))
        if isinstance(value, int):
            return value
        text = str(value)
        if f["key"] == "hex":
            if not _HEX.fullmatch(text) or int(text, 16) >= 1 << 32:
                raise BadRow(f"{f['name']!r}: {value!r} is not a 32-bit hex id")
            return int(text, 16)
        text = text.strip()
        if not _INT.fullmatch(text) or not -(1 << 63) <= int(text) < 1 << 63:
            raise BadRow(f"{f['name']!r}: {value!r} is not a 64-bit integer")
        return int(text)
