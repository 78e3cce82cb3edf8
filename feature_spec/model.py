"""Typed model of NVIDIA DeepLearningExamples' Dataset Feature Specification.

Four sections: ``feature_spec`` (name -> properties), ``source_spec`` (mapping, i.e. split
name -> chunks of ``{type, features, files}``), ``channel_spec`` (``label``, ``numerical``,
``categorical`` -> feature names) and ``metadata``.

The same model describes two things:

* an *input spec*: what a user writes to describe raw data (chunk types ``csv``, ``tsv``,
  ``parquet``, ``criteo``) plus per-feature preprocessing options;
* an *output spec* (a dataset): chunk type ``split_binary``, one file per chunk, byte-compatible
  with NVIDIA's DLRM loaders.

Multi-valued (list) categoricals: ``hotness: N`` (NVIDIA's field) means exactly N values a row, stored
row-major in the feature's one file (``rows * N`` indices); ``hotness: variable`` (or just ``max_hotness: N``,
the most values a row keeps) means a list of any length, stored as its values file plus a row-offsets file
(``cat_<f>.offsets.bin``: int64, rows + 1 entries, the first 0; row r holds values[offsets[r]:offsets[r+1]]),
the chunk listing both files in that order. ``pooling`` (``sum``, the default, or ``mean``) is how the
feature's embedding bag pools a row's values; ``sep`` is the element separator of a list field in CSV/TSV input.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .errors import SpecError

INPUT_CHUNK_TYPES = ("csv", "tsv", "parquet", "criteo")
OUTPUT_CHUNK_TYPE = "split_binary"
CHUNK_TYPES = INPUT_CHUNK_TYPES + (OUTPUT_CHUNK_TYPE,)
CHANNELS = ("label", "numerical", "categorical")
# numerical transforms: log1p(max(x, 0)) (the default); log3p = log(x + 3), NVIDIA DLRM's and TorchRec's; x as is
TRANSFORMS = ("log1p", "log3p", "identity")
NUMERICAL_DTYPES = ("float16", "float32")
CATEGORICAL_DTYPES = ("int8", "int16", "int32", "int64")
# raw value types a user may declare for an input categorical: `hex` is Criteo's 8-digit hex
RAW_CATEGORICAL_TYPES = ("str", "int", "hex")
POOLINGS = ("sum", "mean")
VARIABLE = "variable"   # the ``hotness`` of a variable-length list feature
_COMPARISON = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*$")


class Feature(BaseModel):
    """Properties of one feature. Unknown keys are kept (NVIDIA specs may carry their own)."""

    model_config = ConfigDict(extra="allow")

    dtype: str | None = None
    cardinality: int | Literal["auto"] | None = None
    # --- input-spec options ---
    frequency_threshold: int | None = Field(default=None, ge=0)
    hash_buckets: int | None = None
    transform: Literal[TRANSFORMS] | None = None
    # label derivation for labels that are not 0/1
    positive: Any = None           # value (or list of values) that means label 1, e.g. ">50K"
    positive_if: str | None = None  # numeric comparison that means label 1, e.g. ">= 4"
    # --- multi-valued categoricals (input and output specs) ---
    hotness: int | Literal["variable"] | None = None   # values a row holds: N (fixed) or variable; None: 1
    max_hotness: int | None = Field(default=None, ge=1)   # variable length: the most values a row keeps
    pooling: Literal[POOLINGS] | None = None   # how the embedding bag pools a row's values (default sum)
    sep: str | None = None   # input spec, CSV/TSV: the separator of a list field's elements, e.g. "|"

    @property
    def variable_length(self) -> bool:
        """A list of any length (values file plus offsets file)."""
        return self.hotness == VARIABLE or (self.hotness is None and self.max_hotness is not None)

    @property
    def values_per_row(self) -> int | None:
        """How many values every row holds (1 for a one-hot feature), or None for a variable-length list."""
        return None if self.variable_length else (self.hotness or 1)

    @property
    def multi_valued(self) -> bool:
        """A list feature: fixed hotness > 1 or variable length."""
        return self.values_per_row != 1

    def positive_rule(self) -> tuple[str, float] | None:
        """``positive_if`` parsed into (operator, number), or None."""
        if self.positive_if is None:
            return None
        m = _COMPARISON.match(str(self.positive_if))
        if not m:
            raise ValueError(self.positive_if)
        return m.group(1), float(m.group(2))


class Chunk(BaseModel):
    """A group of features stored together in one or more files."""

    model_config = ConfigDict(extra="allow")

    type: str
    features: list[str]
    files: list[str] = Field(default_factory=list)


class FeatureSpec(BaseModel):
    """The whole spec. ``base_dir`` is where relative file paths resolve (the YAML's folder)."""

    model_config = ConfigDict(extra="forbid")

    feature_spec: dict[str, Feature]
    source_spec: dict[str, list[Chunk]] = Field(default_factory=dict)
    channel_spec: dict[str, list[str]]
    metadata: dict[str, Any] = Field(default_factory=dict)

    # ---- channels -------------------------------------------------------------------
    @property
    def label_feature(self) -> str:
        return self.channel_spec["label"][0]

    @property
    def numerical_features(self) -> list[str]:
        return list(self.channel_spec.get("numerical", []))

    @property
    def categorical_features(self) -> list[str]:
        return list(self.channel_spec.get("categorical", []))

    # ---- kind -----------------------------------------------------------------------
    @property
    def is_dataset(self) -> bool:
        """True for an output spec (every chunk is ``split_binary``)."""
        chunks = [c for cs in self.source_spec.values() for c in cs]
        return bool(chunks) and all(c.type == OUTPUT_CHUNK_TYPE for c in chunks)

    @property
    def splits(self) -> list[str]:
        return list(self.source_spec)

    def cardinality(self, feature: str) -> int:
        card = self.feature_spec[feature].cardinality
        if not isinstance(card, int):
            raise SpecError("has no numeric cardinality.", section="feature_spec", feature=feature,
                            fix="set `cardinality: <number of embedding rows>` (preprocessing writes it).")
        return card

    def file_of(self, split: str, feature: str) -> tuple[str, int]:
        """(relative path, position of the feature within the chunk) for a split-binary feature (a variable-length
        list's values file)."""
        for chunk in self.source_spec.get(split, []):
            if feature in chunk.features:
                return chunk.files[0], chunk.features.index(feature)
        raise SpecError(f"feature '{feature}' has no file in split '{split}'.", section="source_spec",
                        feature=split, fix=f"add a chunk listing '{feature}' under source_spec.{split}.")

    def offsets_file_of(self, split: str, feature: str) -> str | None:
        """Relative path of a variable-length list feature's row-offsets file in ``split``, else None."""
        if not self.feature_spec[feature].variable_length:
            return None
        for chunk in self.source_spec.get(split, []):
            if feature in chunk.features and len(chunk.files) == 2:
                return chunk.files[1]
        raise SpecError(f"variable-length feature '{feature}' has no offsets file in split '{split}'.",
                        section="source_spec", feature=split,
                        fix=f"list its values file and then its offsets file: files: [{split}/"
                        f"{categorical_file_name(feature)}, {split}/{offsets_file_name(feature)}].")

    def file_sizes(self, split: str) -> dict[str, int]:
        """The bytes each file of a split-binary ``split`` must have, by relative path, from ``metadata.rows``
        (and a variable-length list's values file from ``metadata.list_lengths``); empty where the metadata
        holds no row count for the split (NVIDIA's tools write none). The label is one byte a row, the
        numericals one value per feature a row, a categorical ``values_per_row`` indices a row, offsets
        ``rows + 1`` int64."""
        rows = (self.metadata.get("rows") or {}).get(split)
        if not isinstance(rows, int):
            return {}
        sizes: dict[str, int] = {}
        for chunk in self.source_spec.get(split, []):
            if chunk.type != OUTPUT_CHUNK_TYPE or not chunk.files:
                continue
            first = self.feature_spec[chunk.features[0]]
            if chunk.features[0] == self.label_feature:
                sizes[chunk.files[0]] = rows
            elif chunk.features[0] in self.categorical_features and first.variable_length:
                values = ((self.metadata.get("list_lengths") or {}).get(split) or {}).get(chunk.features[0])
                if values is not None:
                    sizes[chunk.files[0]] = values["values"] * _itemsize(first.dtype)
                if len(chunk.files) == 2:
                    sizes[chunk.files[1]] = (rows + 1) * 8
            else:
                width = sum(self.feature_spec[f].values_per_row or 1 for f in chunk.features)
                sizes[chunk.files[0]] = rows * width * _itemsize(first.dtype or "float16")
        return sizes

    # ---- validation -----------------------------------------------------------------
    def validate_spec(self) -> "FeatureSpec":
        """Check the keys (``key_problems``) and the cross-section rules; raise SpecError naming section, feature
        and fix (the first problem; ``dlrmflow spec check`` lists them all)."""
        if problems := key_problems(self):
            path, problem, fix = problems[0]
            raise SpecError(problem, section=path[0], feature=".".join(path[1:]) or None,
                            fix=f"{fix} Run `dlrmflow spec check SPEC` for all problems.")
        _check_channels(self)
        _check_features(self)
        _check_sources(self)
        _check_file_names(self)
        return self


# ---- strictness: keys that are not ours, nor where NVIDIA's format leaves keys open ---------------------------
FEATURE_KEYS = tuple(Feature.model_fields)
CHUNK_KEYS = ("type", "features", "files")
TEXT_CHUNK_KEYS = CHUNK_KEYS + ("header", "separator", "null_values")   # a csv/tsv chunk's layout (docs/spec.md)
# metadata is NVIDIA's open section; these keys are ours (an input spec's, then a dataset's)
METADATA_KEYS = ("name", "id", "preprocessing", "format_version", "fingerprint", "rows", "bad_rows", "index0_rows",
                 "vocab", "hash_buckets", "checksums", "list_lengths")
SPEC_DEFAULTS = ("split", "frequency_threshold")   # an input spec's metadata.preprocessing: defaults of preprocess
_SPLIT_COLUMN = re.compile(r"^\s*column:([^:]+)")


def close_match(word: str, known) -> str | None:
    """The closest of ``known`` to a misspelt ``word`` (difflib), or None."""
    import difflib
    close = difflib.get_close_matches(str(word), [str(k) for k in known], n=1, cutoff=0.75)
    return close[0] if close else None


def _unknown(key: str, near: str | None) -> str:
    return f"unknown key '{key}'" + (f" (did you mean '{near}'?)." if near else ".")


def key_problems(spec: FeatureSpec) -> list[tuple[tuple, str, str]]:
    """Every key of ``spec`` that would be ignored, as (path of keys, problem, fix): unknown keys of our own
    sections (an input spec's feature options, chunks, channels, metadata.preprocessing), a key of NVIDIA's open
    sections (a dataset's feature properties, metadata) that is a near miss of one of ours, and a feature that no
    channel uses (the id column, the split column and a text chunk's columns aside)."""
    out: list[tuple[tuple, str, str]] = []
    dataset = spec.is_dataset
    for name, f in spec.feature_spec.items():
        for key in f.model_extra or {}:
            near = close_match(key, FEATURE_KEYS)
            if near or not dataset:
                out.append((("feature_spec", name, key), _unknown(key, near), f"write '{near}'." if near else
                            f"remove it; a feature's keys are {', '.join(FEATURE_KEYS)} (docs/spec.md)."))
    for split, chunks in spec.source_spec.items():
        for i, chunk in enumerate(chunks):
            known = TEXT_CHUNK_KEYS if chunk.type in ("csv", "tsv") else CHUNK_KEYS
            for key in set(chunk.model_extra or {}) - set(known):
                problem = f"chunk {i}: {_unknown(key, close_match(key, known))}"
                out.append((("source_spec", split, str(i), key), problem, f"a {chunk.type} chunk has only "
                            f"{', '.join(known)}."))
    for channel in spec.channel_spec:
        if channel not in CHANNELS and (near := close_match(channel, CHANNELS)):
            out.append((("channel_spec", channel), f"unknown channel '{channel}' (did you mean '{near}'?).",
                        f"use only {', '.join(CHANNELS)}."))
    for key in spec.metadata:
        if key not in METADATA_KEYS and (near := close_match(key, METADATA_KEYS)):
            out.append((("metadata", key), _unknown(key, near), f"write '{near}'."))
    defaults = spec.metadata.get("preprocessing")
    if not dataset and isinstance(defaults, dict):
        for key in defaults:
            if key not in SPEC_DEFAULTS:
                out.append((("metadata", "preprocessing", key), _unknown(key, close_match(key, SPEC_DEFAULTS)),
                            f"a spec's metadata.preprocessing holds only {' and '.join(SPEC_DEFAULTS)}; other "
                            "settings are options of `dlrmflow preprocess` (--help)."))
    used = {n for names in spec.channel_spec.values() for n in names} | _named_columns(spec)
    for name in spec.feature_spec:
        if name not in used:
            out.append((("feature_spec", name), "is in no channel, so it would be dropped.",
                        f"add '{name}' to channel_spec.numerical or channel_spec.categorical, or remove it from "
                        "feature_spec (a column of a headerless file: list the file's columns in a csv/tsv chunk's "
                        "`features`)."))
    return out


def _named_columns(spec: FeatureSpec) -> set[str]:
    """Columns a spec may define without a channel: metadata.id, the split column of metadata.preprocessing.split
    and the columns a text chunk names (a headerless file's)."""
    names = {c for chunks in spec.source_spec.values() for chunk in chunks if chunk.type != OUTPUT_CHUNK_TYPE
             for c in chunk.features}
    if isinstance(spec.metadata.get("id"), str):
        names.add(spec.metadata["id"])
    split = (spec.metadata.get("preprocessing") or {}).get("split") \
        if isinstance(spec.metadata.get("preprocessing"), dict) else None
    if isinstance(split, str) and (m := _SPLIT_COLUMN.match(split)):
        names.add(m.group(1).strip())
    return names


def cross_problems(spec: FeatureSpec) -> list[SpecError]:
    """The first problem of each cross-section rule (channels, features, sources), for a listing of all problems."""
    out = []
    for rule in (_check_channels, _check_features, _check_sources, _check_file_names):
        try:
            rule(spec)
        except SpecError as e:
            out.append(e)
    return out


def _check_channels(spec: FeatureSpec) -> None:
    for channel in spec.channel_spec:
        if channel not in CHANNELS:
            raise SpecError(f"unknown channel '{channel}'.", section="channel_spec", feature=channel,
                            fix=f"use only {', '.join(CHANNELS)}.")
    labels = spec.channel_spec.get("label", [])
    if len(labels) != 1:
        raise SpecError(f"needs exactly one label feature (got {labels}).", section="channel_spec",
                        feature="label", fix="list the one column that holds the click/label under channel_spec.label.")
    seen: dict[str, str] = {}
    for channel, names in spec.channel_spec.items():
        for name in names:
            if name in seen:
                raise SpecError(f"feature is in both channel '{seen[name]}' and '{channel}'.",
                                section="channel_spec", feature=name, fix="keep it in one channel.")
            seen[name] = channel
            if name not in spec.feature_spec:
                raise SpecError(f"channel '{channel}' names a feature that feature_spec does not define.",
                                section="channel_spec", feature=name,
                                fix=f"add `{name}: {{}}` under feature_spec or remove it from channel_spec.{channel}.")
    if not spec.numerical_features and not spec.categorical_features:
        raise SpecError("has no numerical and no categorical features.", section="channel_spec",
                        fix="list the model's input columns under channel_spec.numerical / channel_spec.categorical.")


def _check_features(spec: FeatureSpec) -> None:
    numerical, categorical = set(spec.numerical_features), set(spec.categorical_features)
    dataset = spec.is_dataset
    for name, f in spec.feature_spec.items():
        if f.hash_buckets is not None:
            if name not in categorical:
                raise SpecError("hash_buckets applies to categorical features only.", section="feature_spec",
                                feature=name, fix="remove hash_buckets or move the feature to channel_spec.categorical.")
            if f.hash_buckets < 2:
                raise SpecError(f"hash_buckets must be >= 2 (got {f.hash_buckets}).", section="feature_spec",
                                feature=name, fix="set it to the number of embedding rows you want, e.g. 100000, "
                                "or remove it to build a vocabulary.")
            if f.frequency_threshold is not None:
                raise SpecError("has both hash_buckets and frequency_threshold.", section="feature_spec",
                                feature=name, fix="choose one: hashing keeps every value, the threshold builds a vocabulary.")
        _check_hotness(name, f, categorical)
        if f.transform is not None and name not in numerical:
            raise SpecError(f"transform '{f.transform}' applies to numerical features only.", section="feature_spec",
                            feature=name, fix="remove transform or move the feature to channel_spec.numerical.")
        if (f.positive is not None or f.positive_if is not None) and name != spec.label_feature:
            raise SpecError("positive/positive_if applies to the label only.", section="feature_spec", feature=name,
                            fix="move it to the label feature.")
        if f.positive is not None and f.positive_if is not None:
            raise SpecError("has both positive and positive_if.", section="feature_spec", feature=name,
                            fix="use `positive: <value>` for a category or `positive_if: '>= 4'` for a number.")
        if f.positive_if is not None:
            try:
                f.positive_rule()
            except ValueError:
                raise SpecError(f"positive_if '{f.positive_if}' is not a comparison with a number.",
                                section="feature_spec", feature=name, fix="write e.g. `positive_if: '>= 4'`.") from None
        if dataset:
            _check_dataset_dtype(name, f, spec.label_feature, numerical, categorical)
        elif name in categorical and f.dtype is not None and f.dtype not in RAW_CATEGORICAL_TYPES:
            raise SpecError(f"unknown raw categorical dtype '{f.dtype}'.", section="feature_spec", feature=name,
                            fix=f"use one of {', '.join(RAW_CATEGORICAL_TYPES)} (hex = Criteo's 8-digit hex ids), "
                            "or leave dtype out.")


def _check_hotness(name: str, f: Feature, categorical: set) -> None:
    listed = [k for k in ("hotness", "max_hotness", "pooling", "sep") if getattr(f, k) is not None]
    if listed and name not in categorical:
        raise SpecError(f"{', '.join(listed)} applies to categorical features only.", section="feature_spec",
                        feature=name, fix=f"remove {listed[0]} or move the feature to channel_spec.categorical.")
    if isinstance(f.hotness, int) and f.hotness < 1:
        raise SpecError(f"hotness must be >= 1 (got {f.hotness}).", section="feature_spec", feature=name,
                        fix="set `hotness: N` (exactly N values a row) or `hotness: variable` (a list of any length).")
    if isinstance(f.hotness, int) and f.max_hotness is not None:
        raise SpecError("has both a fixed hotness and max_hotness.", section="feature_spec", feature=name,
                        fix="use `hotness: N` for exactly N values a row, or `max_hotness: N` for lists of up to N.")
    if f.sep is not None and (not f.sep or "\n" in f.sep):
        raise SpecError(f"sep {f.sep!r} cannot separate list elements.", section="feature_spec", feature=name,
                        fix='use a character that is not the field separator, e.g. `sep: "|"`.')


def _check_dataset_dtype(name: str, f: Feature, label: str, numerical: set, categorical: set) -> None:
    if name == label and f.dtype not in (None, "bool"):
        raise SpecError(f"a split_binary label must be bool (got {f.dtype}).", section="feature_spec",
                        feature=name, fix="set `dtype: bool`.")
    if name in numerical and f.dtype not in (None, *NUMERICAL_DTYPES):
        raise SpecError(f"numerical dtype must be one of {NUMERICAL_DTYPES} (got {f.dtype}).",
                        section="feature_spec", feature=name, fix="set `dtype: float16`.")
    if name in categorical:
        if f.dtype not in CATEGORICAL_DTYPES:
            raise SpecError(f"categorical dtype must be one of {CATEGORICAL_DTYPES} (got {f.dtype}).",
                            section="feature_spec", feature=name,
                            fix="set the integer type its file is written in, e.g. `dtype: int32`.")
        if not isinstance(f.cardinality, int) or f.cardinality < 1:
            raise SpecError(f"a categorical needs a positive integer cardinality (got {f.cardinality}).",
                            section="feature_spec", feature=name,
                            fix="set `cardinality:` to the number of embedding rows (largest index + 1).")


def _check_sources(spec: FeatureSpec) -> None:
    known = set(spec.feature_spec)
    for split, chunks in spec.source_spec.items():
        where = f"source_spec.{split}"
        covered: dict[str, int] = {}
        for i, chunk in enumerate(chunks):
            if chunk.type not in CHUNK_TYPES:
                raise SpecError(f"chunk {i} has unknown type '{chunk.type}'.", section="source_spec", feature=split,
                                fix=f"use one of {', '.join(CHUNK_TYPES)}.")
            if not chunk.files and (chunk.type not in ("csv", "tsv") or spec.is_dataset):   # a text layout: --input
                raise SpecError(f"chunk {i} lists no files.", section="source_spec", feature=split,
                                fix="add `files: [path/relative/to/the/yaml]`.")
            for path in chunk.files:
                check_relative_path(path, where=where)
            for name in chunk.features:
                if name not in known:
                    raise SpecError(f"chunk {i} names feature '{name}' that feature_spec does not define.",
                                    section="source_spec", feature=split, fix=f"define `{name}` under feature_spec.")
                covered[name] = covered.get(name, 0) + 1
            if chunk.type == OUTPUT_CHUNK_TYPE and len(chunk.files) != _files_of_chunk(spec, chunk):
                raise SpecError(f"split_binary chunk {i} must have exactly {_files_of_chunk(spec, chunk)} file(s) "
                                f"(got {len(chunk.files)}).", section="source_spec", feature=split,
                                fix="give each chunk one file (a variable-length list: its values file, then its "
                                "offsets file).")
        if spec.is_dataset:
            _check_dataset_chunks(spec, split, chunks, covered)


def _files_of_chunk(spec: FeatureSpec, chunk: Chunk) -> int:
    listed = len(chunk.features) == 1 and chunk.features[0] in spec.feature_spec \
        and chunk.features[0] in spec.categorical_features and spec.feature_spec[chunk.features[0]].variable_length
    return 2 if listed else 1


def _check_dataset_chunks(spec: FeatureSpec, split: str, chunks: list[Chunk], covered: dict[str, int]) -> None:
    needed = [spec.label_feature, *spec.numerical_features, *spec.categorical_features]
    for name in needed:
        if covered.get(name, 0) != 1:
            raise SpecError(f"feature '{name}' must be in exactly one chunk (found {covered.get(name, 0)}).",
                            section="source_spec", feature=split,
                            fix=f"list '{name}' in one split_binary chunk of source_spec.{split}.")
    categorical = set(spec.categorical_features)
    numerical = spec.numerical_features
    for chunk in chunks:
        cats = [f for f in chunk.features if f in categorical]
        if cats and len(chunk.features) != 1:
            raise SpecError(f"categorical '{cats[0]}' must have a chunk (and file) of its own.",
                            section="source_spec", feature=split, fix="split the chunk: one cat_<name>.bin per categorical.")
        nums = [f for f in chunk.features if f in set(numerical)]
        if nums and nums != numerical:
            raise SpecError("all numerical features must be in one chunk, in channel_spec order.",
                            section="source_spec", feature=split,
                            fix=f"use one chunk with features {numerical}.")


def _check_file_names(spec: FeatureSpec) -> None:
    """Two features never share a file: an input spec's categoricals by the files preprocessing names after them
    (``categorical_file_name``, ``offsets_file_name``, the list lengths of its parts, the vocabulary's
    ``path_segment``: ``x`` and ``cat_x.bin``, ``a/b`` and ``a_b-82badf67`` would meet), a dataset's by the files
    its chunks list."""
    owner: dict[str, str] = {}

    def claim(path: str, name: str, section: str, where: str) -> None:
        other = owner.setdefault(path, name)
        if other != name:
            raise SpecError(f"features '{other}' and '{name}' would share the file {path} (files are named after "
                            "their features: docs/dataset-format.md).", section=section, feature=where,
                            fix=f"rename '{name}' (or '{other}').")

    if spec.is_dataset:
        for split, chunks in spec.source_spec.items():
            for chunk in chunks:
                for path in chunk.files:
                    claim(posixpath.normpath(path), ", ".join(chunk.features), "source_spec", split)
        return
    for name in spec.categorical_features:
        column = categorical_file_name(name)
        paths = [f"<split>/{column}", f"vocab/{path_segment(name)}.parquet"]
        if spec.feature_spec[name].variable_length:
            paths += [f"<split>/{offsets_file_name(name)}", f"<split>/{column[:-len('.bin')]}.lengths.bin"]
        for path in paths:
            claim(path, name, "feature_spec", name)


def check_relative_path(path: str, *, where: str) -> None:
    """A file path in a spec must be relative to the YAML and stay inside its folder."""
    p = path.replace("\\", "/")
    if "://" in p or p.startswith("/") or re.match(r"^[A-Za-z]:", p):
        raise SpecError(f"file path '{path}' is absolute.", section=where.split(".")[0], feature=where.split(".", 1)[-1],
                        fix="write paths relative to the folder of the YAML file.")
    depth = 0
    for part in p.split("/"):
        if part == "..":
            depth -= 1
        elif part not in ("", "."):
            depth += 1
        if depth < 0:
            raise SpecError(f"file path '{path}' escapes the folder of the YAML file.", section=where.split(".")[0],
                            feature=where.split(".", 1)[-1], fix="keep data files in or below the YAML's folder.")


def _itemsize(dtype: str | None) -> int:
    import numpy as np   # on first use: the spec's model is imported by the CLI's --help
    return np.dtype(dtype or "bool").itemsize


def categorical_dtype(cardinality: int) -> str:
    """Smallest of int8/int16/int32/int64 that holds ``cardinality`` (NVIDIA's rule: cardinality < max)."""
    for name, limit in (("int8", 2**7 - 1), ("int16", 2**15 - 1), ("int32", 2**31 - 1)):
        if cardinality < limit:
            return name
    return "int64"


_SAFE = re.compile(r"[^A-Za-z0-9_.\-]")
_SEGMENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,119}$")   # no separator, no leading dot: never '..'


def path_segment(feature: str) -> str:
    """A feature's name as ONE safe file-name segment, for every file named after a feature (its column,
    vocabulary and counts): the name itself when it is one (letters, digits, '_', '.', '-'; not starting with
    '.' or '-'), else its safe characters and a hash of the whole name (``../../x`` -> ``x-3f2a9c1b``), so that
    a hostile or odd name can never reach outside its folder and two names never share a file."""
    if _SEGMENT.match(feature):
        return feature
    digest = hashlib.blake2b(feature.encode(), digest_size=4).hexdigest()
    stem = _SAFE.sub("_", feature).strip("._-")[:100]
    return f"{stem}-{digest}" if stem else f"f-{digest}"


def categorical_file_name(feature: str) -> str:
    """File name of a categorical's column: ``cat_<feature>.bin`` (``path_segment``: unsafe names mapped), or
    the name itself when it already is a safe ``cat_*.bin`` (NVIDIA's own specs name features so)."""
    if feature.startswith("cat_") and feature.endswith(".bin") and _SEGMENT.match(feature):
        return feature
    return f"cat_{path_segment(feature)}.bin"


def offsets_file_name(feature: str) -> str:
    """File name of a variable-length list feature's row offsets: ``cat_<feature>.offsets.bin``."""
    return categorical_file_name(feature)[:-len(".bin")] + ".offsets.bin"
