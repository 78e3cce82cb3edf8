"""A preprocessing job: a PreprocessConfig with its input spec, input files, split rule and fingerprint looked up."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass

import feature_spec as fspec
from common.errors import UserError
from common.store import Store
from feature_spec import FeatureSpec

from . import lists, splits
from .config import DEFAULT_SPLIT, PreprocessConfig
from .inputs import InputFile, expand, file_type, split_mapping
from .readers import Format, parquet_types
from .specs import resolved
from .transforms import Transforms
from .work import FileParts, Mirror, WorkFolder

FORMAT_VERSION = 1
PARTS_VERSION = 3   # of the per-file parts' layout: a new version parses every file again (3: profile.json)


@dataclass(frozen=True)
class Job:
    """Everything the stages need, fixed before the first one runs (built by ``Job.from_config``)."""

    config: PreprocessConfig
    spec: FeatureSpec
    inputs: list[InputFile]
    rule: splits.SplitRule
    threshold: int
    transforms: Transforms
    fmt: Format
    types: dict         # column -> the type its raw values are parsed as
    fingerprint: str
    dataset: str
    work: WorkFolder
    parts: list[FileParts]   # per input file
    mirror: Mirror           # where ``work`` and ``parts`` live (the store, or a local folder)

    @classmethod
    def from_config(cls, config: PreprocessConfig) -> Job:
        """Look up the spec (``store:NAME`` or pasted YAML: ``specs.resolved``) and inputs, derive the split rule and
        fingerprint, name the dataset and work folders."""
        config = resolved(config)
        spec = _spec(config)
        defaults = spec.metadata.get("preprocessing") or {}
        inputs = expand(config.inputs or _spec_files(config.spec, spec))
        rule = _rule(config, defaults, [f.split for f in inputs])
        if rule.kind == "files":
            for f in inputs:
                f.split = f.split or "train"
        threshold = config.frequency_threshold if config.frequency_threshold is not None \
            else int(defaults.get("frequency_threshold", 0))
        numeric_cuts = bool(rule.cuts) and all(_is_number(c) for c in rule.cuts)
        transforms = Transforms.from_spec(spec, threshold, rule.column, numeric_cuts)
        fmt = _format(config.spec, spec, inputs)
        native = parquet_types(inputs[0].uri) if fmt.kind == "parquet" else None
        lists.check_input(spec, fmt.kind, native, inputs[0].uri)
        settings = {**config.output_settings(), "frequency_threshold": threshold, "split": rule.text(),
                           "format_version": FORMAT_VERSION}
        identity = {"inputs": [f.model_dump() for f in inputs], "config": settings,
                    "spec": spec.model_dump(mode="json", exclude={"source_spec"})}
        fingerprint = _digest(identity)
        key = re.sub(r"[^A-Za-z0-9_.\-]", "_", str(spec.metadata.get("name") or "dataset")) + "-" + fingerprint[:12]
        types = transforms.parse_types(native)
        parse = _parse_settings(config, rule, transforms, fmt, types)
        mirror = Mirror.locate(config.work_dir, config.out)
        parts = [FileParts.locate(mirror, _digest({**file_identity(f), **parse})) for f in inputs]
        return cls(config, spec, inputs, rule, threshold, transforms, fmt, types, fingerprint,
                   Store(config.out).dataset_uri(key), WorkFolder.locate(config.work_dir, mirror, key),
                   parts, mirror)

    def file_entry(self, i: int) -> dict:
        """What ``parts[i]`` records about itself: the input file's identity and the parse settings."""
        return {**file_identity(self.inputs[i]),
                **_parse_settings(self.config, self.rule, self.transforms, self.fmt, self.types)}

    def settings(self) -> dict:
        """The effective preprocessing settings recorded in the dataset's metadata."""
        return {"spec": self.config.spec, "inputs": [f.uri for f in self.inputs], "split": self.rule.text(),
                **self.config.output_settings(), "frequency_threshold": self.threshold,
                "max_bad_fraction": self.config.max_bad_fraction}


def file_identity(f: InputFile) -> dict:
    """An input file's identity (not the split it is mapped to: the parts serve it in any split)."""
    return {"uri": f.uri, "size": f.size, "version": f.version}


def _parse_settings(config: PreprocessConfig, rule: splits.SplitRule, transforms: Transforms, fmt: Format,
                    types: dict) -> dict:
    """Everything that changes a file's parse and all-rows counts besides the file itself (the thresholds,
    count_on, the output dtype and the split, except a column rule's, do not)."""
    t = dataclasses.asdict(transforms)
    for c in t["categorical"]:
        del c["threshold"]
        if (c["hotness"], c["max_hotness"], c["sep"]) == (1, None, None):
            del c["hotness"], c["max_hotness"], c["sep"]   # one-hot: the keys its parts had before lists
    layout = {k: v for k, v in dataclasses.asdict(fmt).items() if k not in ("sep", "null_values") or v}
    return {"parts_version": PARTS_VERSION, "transforms": t, "format": layout,   # a default layout: the old digest
            "types": {c: str(d) for c, d in types.items()}, "on_bad_row": config.on_bad_row,
            "split_column_rule": rule.text() if rule.kind == "column" else None}


def _digest(identity: dict) -> str:
    return hashlib.blake2b(json.dumps(identity, sort_keys=True, default=str).encode(), digest_size=16).hexdigest()


def _spec_files(spec_uri: str, spec: FeatureSpec) -> list[str]:
    items = [f"{split}={fspec.file_uri(spec_uri, path)}" for split, chunks in spec.source_spec.items()
             for chunk in chunks for path in chunk.files]
    if not items:
        raise UserError("no input files. Fix: pass --input PATH (files, folders or globs), or list files "
                        "under source_spec in the spec.")
    return items


def split_rule(config: PreprocessConfig) -> splits.SplitRule:
    """The split rule of ``config``, known before any input is read; its ``splits`` are those preprocessing
    will write (empty when the data decides: ``column:COL`` without cut points)."""
    config = resolved(config)
    spec = _spec(config)
    mapped = [split_mapping(i)[0] for i in config.inputs] if config.inputs else \
        [s for s, chunks in spec.source_spec.items() for c in chunks if c.files]
    return _rule(config, spec.metadata.get("preprocessing") or {}, mapped)


def _spec(config: PreprocessConfig) -> FeatureSpec:
    if "/" not in config.spec and not config.spec.endswith((".yaml", ".yml")):
        return fspec.preset(config.spec)
    return fspec.load(config.spec)


def _rule(config: PreprocessConfig, defaults: dict, mapped: list[str | None]) -> splits.SplitRule:
    """The split rule: ``files`` when inputs are mapped to splits (unmapped ones: train), else the given rule."""
    if first := next(filter(None, mapped), None):
        if config.split:
            raise UserError(f"--split {config.split} cannot be combined with inputs mapped to splits "
                            f"('{first}=...'). Fix: use one of the two.")
        return splits.SplitRule(kind="files", splits=splits.order_names({s or "train" for s in mapped}))
    return splits.parse(config.split or defaults.get("split") or DEFAULT_SPLIT)


def _format(spec_name: str, spec: FeatureSpec, inputs: list[InputFile]) -> Format:
    chunks = [c for cs in spec.source_spec.values() for c in cs]
    if spec_name == "criteo":
        return Format("criteo", columns=fspec.CRITEO_COLUMNS)
    kind = chunks[0].type if chunks else file_type(inputs[0].uri)
    if kind == "criteo":
        return Format("criteo", columns=fspec.CRITEO_COLUMNS)
    header = bool((chunks[0].model_extra or {}).get("header", kind == "csv")) if chunks else kind == "csv"
    columns = list(chunks[0].features) if chunks and not header else list(spec.feature_spec)
    extra = (chunks[0].model_extra or {}) if chunks else {}
    sep, nulls = extra.get("separator"), extra.get("null_values") or ()
    if sep is not None and (not isinstance(sep, str) or len(sep) != 1 or sep in '"\n'):
        raise UserError(f"{spec_name}: source_spec's `separator: {sep!r}` is not one character. Fix: write the "
                        "character between fields, e.g. separator: ';' (docs/spec.md).")
    if isinstance(nulls, str) or not all(isinstance(v, str) for v in nulls):
        raise UserError(f"{spec_name}: source_spec's `null_values: {nulls!r}` is not a list of text. Fix: e.g. "
                        "null_values: ['NA', '?'] (docs/spec.md).")
    return Format(kind, columns=columns, header=header, sep=sep, null_values=tuple(nulls))


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False

