"""Serving bundles: one checkpoint of a run as a self-contained folder that needs only PyTorch to serve.

``export_bundle(run, step, out)`` writes (local folder or s3://):

- ``weights.pt``: the model's unsharded weights, one plain state dict of ``training.inference.DLRMInference``
  (DCP reshards the checkpoint into whole tensors, whatever world size and plan wrote it);
- ``model.pt2``: that module as a ``torch.export`` program (``write_program``; ``torch.export.load(f).module()``),
  dynamic batch: ``(categorical [B, n_cat] int64, numerical [B, n_num] float32) -> probabilities [B]``, or for a
  model with list features ``(values, lengths, numerical)`` (a KeyedJaggedTensor's values and lengths); verified
  against the eager module at export (the manifest's ``program.max_abs_diff``). What ``load_bundle``'s
  ``predictor`` serves;
- ``raw.pt2``, ``raw.json``, ``client.py``: the program that takes raw rows (``training.raw_inputs``: the input
  spec's transforms, vocabulary lookup and hash buckets inside), its features and its reference client (pure
  Python); the manifest's ``raw`` (``file`` None and ``why``: a bundle without an input spec or with a feature the
  program cannot encode);
- ``model.pt``: the same module as TorchScript (``torch.jit.load``; ``forward`` and ``forward_lists``),
  **deprecated** (torch deprecates torch.jit): written until ``TORCHSCRIPT_UNTIL`` for the servers that load it,
  used here only for a bundle without ``model.pt2``;
- ``model.json``: the model config, feature order, table sizes, the source (run, step, dataset) and the
  checkpoint's calibration (``training.calibration``: ``a, b`` of the logit, in ``model.pt2`` and ``model.pt``; null:
  none);
- ``feature_spec.yaml``, ``vocab/<f>.parquet`` and ``input_spec.yaml``: the dataset's spec, vocabularies and
  the input spec it was preprocessed with (the numerical transforms, hash buckets, label rule), so raw rows
  encode exactly as for training (``preprocessing.apply.encode_inputs``);
- with ``quantize="int8"`` (``dlrmflow export --quantize int8``), ``model.pt2`` and ``raw.pt2`` hold int8 embedding
  rows (``training.quantize``; the manifest's ``quantize``), the same quantized model in both;
- ``manifest.json`` (last): the sha256 of every file; ``load_bundle`` checks them (and, for a champion's bundle,
  the manifest's own sha256 against the one champion.json pins).

``export_verified`` is what a promotion calls: keep a bundle that verifies, else export it again, re-read every file's
sha256 against the manifest, and return the sha256 of ``manifest.json`` (which champion.json records). The export
runs in a child process (``python -P -m training.export``, dying with its parent and started after
``$DLRMFLOW_LAUNCH_PREFIX`` as a local rank job is: ``common.process``), so that a
crash of torch's writers (a SIGABRT from C++) never takes the calling flow down: a child that fails or dies is a
UserError naming the bundle, how the child ended and the free space there, and what it left (its temporary
folder) is removed; nothing at the bundle's place verifies, so a re-run exports it again.

A full disk is ``common.space.NoSpace`` (the path, the free space, the fix): refused before writing when the bundle's
filesystem has less free space than the bundle takes (its weights four times, ``weights.pt``, ``model.pt2``,
``raw.pt2`` and ``model.pt``, and the vocabularies twice), or raised by the write that found none.

Test hook: ``$DLRMFLOW_EXPORT_CRASH=abort`` aborts the exporting process (SIGABRT, as torch's C++ does) once
``weights.pt`` is written in the bundle's temporary folder; unset, it does nothing.

A local bundle is built in a temporary sibling folder and renamed into place; on S3 the manifest is written
after every other file, so a bundle without one is incomplete. Exporting the same run and step again finds
the manifest and does nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import posixpath
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from fsspec.implementations.local import LocalFileSystem

import feature_spec as fspec
from common.config import load_yaml
from common.atomic import atomic_dir, remove_temp, write_atomic, write_uri
from common.errors import UserError
from common.process import dying_with_this_process, exit_text, launch_command
from common.space import NoSpace, check_free, free_text, writing
from common.store import filesystem, read_text
from training.checkpoint import Checkpointer
from training.inference import DLRMInference, export_program, plain_state
from training.model_repo import write_repository
from training.quantize import QUANTIZE, manifest_entry, quantize_int8
from training.raw_inputs import write_raw
from training.rundir import RunDir

FORMAT = 1
MANIFEST = "manifest.json"
WEIGHTS, MODULE, CONFIG = "weights.pt", "model.pt", "model.json"
PROGRAM = "model.pt2"   # the torch.export program; MODULE (TorchScript) is deprecated, written until TORCHSCRIPT_UNTIL
TORCHSCRIPT_UNTIL = "2027-06"
VERIFY_TOLERANCE = 1e-5   # the most a saved model's probabilities may differ from the eager module's at export
# torch's deprecation of TorchScript (torch.jit.script/save/load), known: kept off the console while it is written
JIT_DEPRECATED = r"`torch\.jit\.\w+` is deprecated"
SPEC, INPUT_SPEC = "feature_spec.yaml", "input_spec.yaml"
MODEL_PREFIX = "model.model."   # the TorchRec DLRM's keys inside a checkpoint (Trainer.state_dict: DLRMTask.model)
CRASH = "DLRMFLOW_EXPORT_CRASH"   # the test hook (see the module doc)
NO_SPACE_FIX = ("free space on {mount} (`dlrmflow gc` removes what the store no longer needs), or export to a "
                "filesystem with room (--store; `dlrmflow export --out`)")
ERROR_LINES = 20   # of a failed export child's output, in its error
RESULT = "dlrmflow-export-error: "   # the line an export child prints its UserError on (JSON after it)
WRITER = "dlrmflow-export-writer: "   # the line an export child prints its pid on first (its temporary names hold it)
TMP_FIX = "free space on {mount} (the temporary folder), or set TMPDIR to a folder with room"
# left out of them: library warnings (python's "file:line: XWarning:" and its 2-space source echo, logging's
# WARNING:) and the native stack frames of a C++ abort (its "what():" line is kept)
NOISE = re.compile(r"^(WARNING:|\S+:\d+: \w*Warning: |  (?!File )\S|frame #\d+: |<omitting python frames>)")


def unsharded_state(run: RunDir | str, step: int) -> dict[str, torch.Tensor]:
    """The TorchRec DLRM's weights of checkpoint ``step`` as whole tensors (keys of ``DLRM``), read with DCP in
    this process (no process group) once its files are verified: every shard of every rank's files lands in one
    tensor per key."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    run = RunDir(run)
    checkpointer = Checkpointer(run)
    checkpointer.verify(step, shared=False)
    reader = FsspecReader(checkpointer.uri(step), **run.options)
    metadata = reader.read_metadata()
    state = {k: torch.empty(m.size, dtype=m.properties.dtype)
             for k, m in metadata.state_dict_metadata.items()
             if k.startswith(MODEL_PREFIX) and isinstance(m, TensorStorageMetadata)}
    dcp.load(state, storage_reader=reader, no_dist=True)
    return {k[len(MODEL_PREFIX):]: v for k, v in state.items()}


def model_config(run: RunDir, step: int) -> dict[str, Any]:
    """What ``DLRMInference`` and the scorer need: the run's arch config, its dataset's feature order and
    table sizes (``max_table_size`` applied), the checkpoint's calibration and where the model came from."""
    from training import calibration
    from training.dlrm import table_name

    cfg = run.load_config()
    spec = fspec.load(cfg.dataset)
    m = cfg.arch
    cap = m.max_table_size
    rows = [spec.cardinality(f) if cap is None else min(spec.cardinality(f), cap) for f in spec.categorical_features]
    return {"interaction": m.interaction, "embedding_dim": m.embedding_dim, "bottom_mlp": list(m.bottom_mlp),
            "top_mlp": list(m.top_mlp), "dcn_layers": m.dcn_layers, "dcn_rank": m.dcn_rank,
            "categorical": list(spec.categorical_features), "numerical": list(spec.numerical_features),
            "tables": [table_name(f) for f in spec.categorical_features], "table_rows": rows,
            "pooling": [spec.feature_spec[f].pooling or "sum" for f in spec.categorical_features],
            "lists": any(spec.feature_spec[f].multi_valued for f in spec.categorical_features),
            "calibration": None if (fit := calibration.of_step(run, step)) is None else fit.to_dict(),
            "source": {"run": run.uri, "step": step, "dataset": cfg.dataset}}


def build_module(config: dict[str, Any], torchrec_state: dict[str, torch.Tensor]) -> DLRMInference:
    """The plain module of ``config`` holding the checkpoint's weights, in eval mode."""
    module = DLRMInference(config)
    module.load_state_dict(plain_state(torchrec_state, config["tables"]))
    return module.eval()


def export_bundle(run: RunDir | str, step: int, out: str, scratch: str | Path | None = None,
                  quantize: str = "none") -> dict[str, Any]:
    """Write the bundle of checkpoint ``step`` of ``run`` to ``out`` (see the module doc); returns its manifest.
    Idempotent: a complete bundle of the same run, step and ``quantize`` at ``out`` is left as it is. A remote bundle
    is first written in a local temporary folder (inside ``scratch`` when given). NoSpace when the disk is full, or
    would be. ``quantize``: ``int8`` writes model.pt2 and raw.pt2 with int8 embedding rows (``training.quantize``)."""
    run = RunDir(run)
    existing = _read_manifest(out)
    if existing and existing.get("source", {}).get("run") == run.uri and existing["source"].get("step") == step \
            and (existing.get("quantize") or {}).get("kind", "none") == quantize:
        return existing

    Checkpointer(run).step_for(step)   # UserError when the run has no such complete checkpoint
    config = model_config(run, step)
    module = build_module(config, unsharded_state(run, step))
    fs, path = filesystem(out)
    need = bundle_bytes(config, module)
    what = f"the serving bundle of {run.uri} step {step}"
    estimate = "its weights four times, weights.pt, model.pt, model.pt2 and raw.pt2, and its vocabularies twice"
    if isinstance(fs, LocalFileSystem):
        check_free(path, need, what, estimate, NO_SPACE_FIX)
        with writing(path, NO_SPACE_FIX), atomic_dir(path) as folder:
            manifest = _write(folder, config, module, quantize)
        return manifest
    with tempfile.TemporaryDirectory(prefix="dlrmflow-bundle-", dir=scratch) as tmp:
        check_free(tmp, need, what + " (staged locally before its upload)", estimate, TMP_FIX)
        with writing(tmp, TMP_FIX):
            manifest = _write(Path(tmp), config, module, quantize)
        if fs.exists(posixpath.join(path, MANIFEST)):
            fs.rm(posixpath.join(path, MANIFEST))   # the old bundle is incomplete from here on
        for name in manifest["files"]:
            fs.put_file(str(Path(tmp) / name), posixpath.join(path, name))
        write_uri(posixpath.join(out, MANIFEST), (Path(tmp) / MANIFEST).read_bytes())
    return manifest


def bundle_bytes(config: dict[str, Any], module: DLRMInference) -> int:
    """About the bytes of the bundle of ``module``: its weights four times (``weights.pt``, and ``model.pt``,
    ``model.pt2`` and ``raw.pt2``, which hold them too) and the dataset's vocabularies twice (``raw.pt2`` holds
    their keys)."""
    weights = sum(t.numel() * t.element_size() for t in module.state_dict().values())
    dataset = config["source"]["dataset"]
    spec_uri = posixpath.join(dataset, SPEC)
    spec = read_text(spec_uri)
    vocab = 0
    for relative in (((load_yaml(spec, spec_uri) or {}).get("metadata") or {}).get("vocab") or {}).values():
        fs, path = filesystem(posixpath.join(dataset, str(relative)))
        try:
            vocab += int(fs.size(path) or 0)
        except (FileNotFoundError, OSError):
            pass   # _write names a missing one
    return 4 * weights + 2 * vocab + len(spec)


def verify_bundle(uri: str, run: str, step: int) -> str:
    """The sha256 of the bundle's ``manifest.json`` once every file at ``uri`` matches the manifest's sha256 and
    the bundle is of checkpoint ``step`` of ``run``; UserError otherwise (what is missing or altered)."""
    with tempfile.TemporaryDirectory(prefix="dlrmflow-verify-") as cache, writing(cache):   # only a remote one's
        bundle = load_bundle(uri, cache=cache)
    source = bundle.manifest.get("source") or {}
    # the run by its name in the store: a store restored at another path keeps its bundles (their manifests hold
    # the run's URI of when they were written)
    if (posixpath.basename(str(source.get("run") or "").rstrip("/")), source.get("step")) != (RunDir(run).name, step):
        raise UserError(f"{uri}: the bundle is of run {source.get('run')} step {source.get('step')}, not of {run} "
                        f"step {step}. Fix: re-export it (dlrmflow export).")
    fs, path = filesystem(uri)
    return hashlib.sha256(fs.cat_file(posixpath.join(path, MANIFEST))).hexdigest()


def export_verified(run: RunDir | str, step: int, out: str) -> str:
    """The sha256 of the manifest of a bundle of checkpoint ``step`` of ``run`` at ``out`` whose files were all
    re-read and checked (``verify_bundle``). A bundle there that verifies is kept; one that does not (a file missing
    or altered, another checkpoint's, a partial one) is removed and exported again, in a child process
    (``export_in_child``: its crash is a UserError here, never this process's end)."""
    run = RunDir(run)
    try:
        return verify_bundle(out, run.uri, step)
    except UserError:
        pass
    fs, path = filesystem(out)
    if fs.exists(path):
        fs.rm(path, recursive=True)
    export_in_child(run, step, out)
    return verify_bundle(out, run.uri, step)


def export_in_child(run: RunDir | str, step: int, out: str) -> None:
    """``export_bundle(run, step, out)`` in a child process (``python -P -m training.export``) that dies with this
    one. Its UserError (NoSpace included) is raised here as it was; a child that crashes, or is killed by a signal
    (torch's C++ writers abort on some write errors: SIGABRT), is a UserError naming the bundle, the signal or exit
    code, the free space there and the child's last lines; what it left is removed (a local bundle's temporary
    folder; a remote bundle's uploads stay without their manifest, which is written last, so it never verifies).
    The child inherits this process's environment and working folder (a dataset's relative input spec)."""
    run = RunDir(run)
    fs, path = filesystem(out)
    root = str(Path(__file__).resolve().parents[1])   # the folder that holds the training package
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    with writing(tempfile.gettempdir(), TMP_FIX):
        scratch = tempfile.mkdtemp(prefix="dlrmflow-export-")   # a remote bundle's files before their upload
    tail: deque[str] = deque(maxlen=ERROR_LINES)
    answer: dict[str, Any] = {}
    writer: int | None = None
    try:
        cmd = dying_with_this_process(launch_command(
            [sys.executable, "-P", "-m", "training.export", "--scratch", scratch, run.uri, str(step), out]))
        # its output through a pipe (not a file: the temporary folder may be on the full disk), its last lines kept
        child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 env=env, text=True, errors="replace")
        try:
            for line in child.stdout:
                if line.startswith(RESULT):
                    answer = json.loads(line[len(RESULT):])
                elif line.startswith(WRITER):
                    writer = int(line[len(WRITER):])
                elif line.strip() and not NOISE.match(line):
                    tail.append(line.rstrip("\n"))
            code = child.wait()
        finally:
            if child.poll() is None:   # this process was interrupted: the child goes with it
                child.kill()
                child.wait()
            child.stdout.close()
            if child.returncode and isinstance(fs, LocalFileSystem):
                remove_temp(path, writer or child.pid)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if code == 0:
        return
    if "no_space" in answer:
        raise NoSpace(*answer["no_space"])
    if "error" in answer:
        raise UserError(answer["error"])
    lines = list(tail)   # library warnings left out
    left = ("its partial bundle was removed" if isinstance(fs, LocalFileSystem) else
            "what it uploaded has no manifest (written last), so it is never taken for a bundle")
    said = (f" Its last lines:\n{chr(10).join(lines)}\nFix: see those lines (a full disk: free space there)" if lines
            else " It printed no error. Fix: free space there if the disk is full")
    raise UserError(f"the export of the serving bundle {out} (run {run.uri}, step {step}) failed: its process was "
                    f"{exit_text(code)}; {left} ({free_text(out)}).{said}; running the same command again exports the "
                    "bundle again.")


def _write(folder: Path, config: dict[str, Any], module: DLRMInference, quantize: str = "none") -> dict[str, Any]:
    """Every file of the bundle into the local ``folder``, the manifest last; ``quantize`` int8: model.pt2 and raw.pt2
    of the model with int8 embedding rows (the same one in both: what score --bundle and serving run agree)."""
    if quantize not in QUANTIZE:
        raise ValueError(f"unknown quantization {quantize!r}")   # ExportConfig refuses it first
    dataset = config["source"]["dataset"]
    spec_text = read_text(posixpath.join(dataset, SPEC))
    metadata = (load_yaml(spec_text, posixpath.join(dataset, SPEC)) or {}).get("metadata") or {}
    settings = metadata.get("preprocessing") or {}
    input_spec = settings.get("spec")
    (folder / SPEC).write_text(spec_text)
    if input_spec and ("/" in input_spec or input_spec.endswith((".yaml", ".yml"))):
        try:
            (folder / INPUT_SPEC).write_text(read_text(input_spec))
        except FileNotFoundError:
            raise UserError(f"{dataset} was preprocessed with the input spec {input_spec!r}, which does not exist "
                            "here. Fix: run from the folder preprocessing ran in (for a relative path), or put "
                            "that spec back.") from None
        config["input_spec"] = INPUT_SPEC
    else:
        config["input_spec"] = input_spec   # a built-in preset (criteo), or None: no raw rows (NVIDIA's datasets)
    for relative in (metadata.get("vocab") or {}).values():
        if not _relative(relative):
            raise UserError(f"{dataset}/{SPEC}: metadata.vocab names {relative!r}, which is not a path inside the "
                            "dataset (absolute, or with '..'). Fix: re-run preprocessing for the dataset.")
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        fs, path = filesystem(posixpath.join(dataset, relative))
        fs.get_file(path, str(folder / relative))
    # through Python files: a write error (a full disk) is then an OSError, where torch's own C++ file writer
    # reports a bare RuntimeError, or aborts the process (TorchScript's writer, from a destructor)
    with open(folder / WEIGHTS, "wb") as f:
        torch.save(module.state_dict(), f)
    if os.environ.get(CRASH) == "abort":
        os.abort()
    with open(folder / MODULE, "wb") as f, warnings.catch_warnings():
        warnings.filterwarnings("ignore", JIT_DEPRECATED)
        torch.jit.save(torch.jit.script(module), f)
    served = quantize_int8(module) if quantize == "int8" else module
    program = write_program(served, bool(config.get("lists")), folder / PROGRAM)   # the format to serve
    raw = write_raw(folder, config, served, _input_spec(folder, config["input_spec"]), VERIFY_TOLERANCE)
    serving = write_repository(folder, program, raw)   # model_repository/: the repository of a v2 model server
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", JIT_DEPRECATED)
        scripted = torch.jit.load(str(folder / MODULE), map_location="cpu").eval()
    lists = bool(config.get("lists"))
    torchscript_diff = _max_diff(module, scripted.forward_lists if lists else scripted, lists)
    (folder / CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    manifest = {"format": FORMAT, "kind": "pt2", "program": program, "raw": raw, "module": MODULE, "weights": WEIGHTS,
                "serving": serving,
                "torchscript": {"file": MODULE, "deprecated": True, "written_until": TORCHSCRIPT_UNTIL,
                                "max_abs_diff": torchscript_diff},
                "inputs": {"categorical": ["int64", len(config["categorical"])],
                           "numerical": ["float32", len(config["numerical"])]},
                "output": "probability [B] float32", "source": config["source"],
                "calibration": config.get("calibration"),
                "quantize": None if served is module else {
                    "files": [PROGRAM, raw["file"]] if raw["file"] else [PROGRAM],
                    **manifest_entry(module, served, [sample_inputs(module, lists, n, s) for s, n in ((1, 33), (2, 7))],
                                     lists)},
                "files": {name: {"sha256": _sha256(folder / name), "bytes": (folder / name).stat().st_size}
                          for name in files}}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _input_spec(folder: Path, input_spec: str | None) -> fspec.FeatureSpec | None:
    """The input spec a bundle's rows are read with (its copy, or a preset), for its raw program; None: none."""
    if not input_spec:
        return None
    return fspec.load(str(folder / INPUT_SPEC)) if input_spec == INPUT_SPEC else fspec.preset(input_spec)


def write_program(module: DLRMInference, lists: bool, path: Path) -> dict[str, Any]:
    """``module`` as a ``torch.export`` program saved at ``path`` (``torch.export.save``; loaded with
    ``torch.export.load(path).module()``), with a dynamic batch: ``(categorical [B, n_cat] int64, numerical [B, n_num]
    float32)`` or, ``lists``, ``(values [N] int64, lengths [n_cat * B] int64, numerical)`` (a KeyedJaggedTensor's
    values and lengths). Verified, as saved and loaded again, against the eager module on batches of other sizes than
    the one it was traced on. Returns its manifest entry (file, format, inputs, the largest difference seen)."""
    with torch.inference_mode(False), torch.no_grad():
        program = export_program(module, sample_inputs(module, lists, rows=8, seed=0))
    with open(path, "wb") as f:
        torch.export.save(program, f)
    diff = _max_diff(module, torch.export.load(str(path)).module(), lists)
    n_cat, n_num = int(module.rows.shape[0]), module.bottom[0].in_features
    inputs = ({"values": ["int64", "N"], "lengths": ["int64", f"{n_cat} * B"], "numerical": ["float32", n_num]}
              if lists else {"categorical": ["int64", n_cat], "numerical": ["float32", n_num]})
    return {"file": path.name, "format": f"torch.export (PT2), torch {torch.__version__.split('+')[0]}",
            "inputs": inputs, "output": "probability [B] float32", "max_abs_diff": diff}


def sample_inputs(module: DLRMInference, lists: bool, rows: int, seed: int) -> tuple[torch.Tensor, ...]:
    """Random inputs of ``rows`` rows in the order of the program's signature (lists: 0 to 3 ids a row and
    feature, at least one id in all)."""
    g = torch.Generator().manual_seed(seed)
    n_cat, n_num = int(module.rows.shape[0]), module.bottom[0].in_features
    numerical = torch.rand(rows, n_num, generator=g) * 5
    if not lists:
        return torch.randint(0, 1 << 20, (rows, n_cat), generator=g), numerical
    lengths = torch.randint(0, 4, (n_cat * rows,), generator=g)
    lengths[0] = max(int(lengths[0]), 1)
    return torch.randint(0, 1 << 20, (int(lengths.sum()),), generator=g), lengths, numerical


def _max_diff(module: DLRMInference, predict: Any, lists: bool) -> float:
    """The largest difference of ``predict``'s probabilities from the eager module's on batches of 1, 7 and 33 rows
    (ValueError above ``VERIFY_TOLERANCE``: the saved model does not compute what the module does)."""
    diff = 0.0
    with torch.no_grad():
        for seed, rows in enumerate((1, 7, 33), start=1):
            inputs = sample_inputs(module, lists, rows, seed)
            want = module.forward_lists(*inputs) if lists else module(*inputs)
            diff = max(diff, float((predict(*inputs) - want).abs().max()))
    if diff > VERIFY_TOLERANCE:
        raise ValueError(f"a saved serving model differs from the eager one by {diff} (a bug of the export)")
    return diff


@dataclass(frozen=True)
class Bundle:
    """A verified bundle in a local folder."""

    folder: Path
    manifest: dict[str, Any]
    config: dict[str, Any]

    @property
    def input_spec(self) -> str:
        """The input spec to read raw rows with: the bundle's copy, or a preset's name. UserError when the
        model's dataset recorded none (it was not preprocessed from raw rows)."""
        spec = self.config["input_spec"]
        if not spec:
            raise UserError(f"{self.folder}: the bundle's model was trained on a dataset that records no input "
                            "spec (metadata.preprocessing.spec), so raw rows cannot be encoded for it. Fix: feed "
                            "encoded indices to its model.pt directly, or export a model whose dataset was written "
                            "by `dlrmflow preprocess`.")
        return str(self.folder / spec) if spec == INPUT_SPEC else spec

    def module(self) -> torch.jit.ScriptModule:
        """The TorchScript model (deprecated: ``predictor``), in eval mode on the CPU."""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", JIT_DEPRECATED)
            return torch.jit.load(str(self.folder / MODULE), map_location="cpu").eval()

    def predictor(self) -> Any:
        """``predict(values, lengths, numerical) -> probabilities [B]`` (a KeyedJaggedTensor's values and lengths):
        the bundle's torch.export program, else (a bundle written before them) its TorchScript module, with a
        deprecation warning (FutureWarning: Python shows it) once a process."""
        program = self.manifest.get("program")
        if not program:
            if not _WARNED:
                _WARNED.append(True)
                warnings.warn(f"{self.folder}: a bundle with only a TorchScript model ({MODULE}), which is deprecated "
                              "(torch.jit); re-export it (dlrmflow export) to get its torch.export program "
                              f"({PROGRAM})", FutureWarning, stacklevel=2)   # FutureWarning: shown to the user
            return self.module().forward_lists
        model = torch.export.load(str(self.folder / program["file"])).module()
        if "lengths" in program["inputs"]:
            return lambda values, lengths, numerical: model(values.to(torch.int64), lengths.to(torch.int64), numerical)
        n_cat = program["inputs"]["categorical"][1]   # one id a row and feature: values are [n_cat * B], feature-major
        return lambda values, lengths, numerical: model(values.to(torch.int64).view(n_cat, -1).t(), numerical)


_WARNED: list[bool] = []   # the TorchScript fallback's warning: once a process


def load_bundle(uri: str, cache: str | Path | None = None, manifest_sha256: str | None = None) -> Bundle:
    """The bundle at ``uri`` with every file checked against its manifest's sha256 (UserError naming the file
    that is missing or altered, or a manifest naming a file outside the bundle). ``manifest_sha256``: the sha256
    the manifest itself must have (a champion's bundle: the one champion.json pins). A remote bundle is first
    copied into the local folder ``cache``."""
    fs, path = filesystem(uri)
    try:
        raw = fs.cat_file(posixpath.join(path, MANIFEST))
    except FileNotFoundError:
        raise UserError(f"{uri}: not a complete serving bundle (no {MANIFEST} there). Fix: pass the folder "
                        "`dlrmflow export` wrote, or re-export.") from None
    if manifest_sha256 is not None and hashlib.sha256(raw).hexdigest() != manifest_sha256:
        raise UserError(f"{uri}: the bundle's {MANIFEST} is not the one champion.json pins (sha256 "
                        f"{hashlib.sha256(raw).hexdigest()}, pinned {manifest_sha256}): the bundle was replaced after "
                        "its promotion, so it is not loaded. Fix: find out who changed it (whoever can write the store "
                        "can run code where a bundle is loaded), then re-run the pipeline for the champion's date "
                        "(its `date` in champion.json): the re-run exports and pins the bundle again.")
    manifest = json.loads(raw)
    names = [_inside_bundle(name, uri) for name in manifest["files"]]
    for required in (CONFIG, MODULE):
        if required not in names:
            raise UserError(f"{uri}: the bundle's {MANIFEST} lists no {required}. Fix: re-export the bundle "
                            "(dlrmflow export).")
    program = (manifest.get("program") or {}).get("file")
    if program is not None and program not in names:
        raise UserError(f"{uri}: the bundle's {MANIFEST} names the program {program!r} but does not list it among "
                        "its files. Fix: re-export the bundle (dlrmflow export).")
    if isinstance(fs, LocalFileSystem):
        folder = Path(path)
    else:
        if cache is None:
            raise ValueError("a remote bundle needs a local cache folder")
        folder = Path(cache)
        for name in names:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            try:
                fs.get_file(posixpath.join(path, name), str(folder / name))
            except FileNotFoundError:
                pass   # reported as missing below
    for name, expected in manifest["files"].items():
        if not (folder / name).is_file():
            raise UserError(f"{uri}: bundle file {name} is missing. Fix: re-export the bundle (dlrmflow export).")
        if _sha256(folder / name) != expected["sha256"]:
            raise UserError(f"{uri}: bundle file {name} was altered (its sha256 differs from {MANIFEST}). "
                            "Fix: re-export the bundle (dlrmflow export).")
    return Bundle(folder, manifest, json.loads((folder / CONFIG).read_text()))


def _inside_bundle(name: Any, uri: str) -> str:
    """``name`` (a file the manifest lists) when it is a relative path inside the bundle: never absolute, never
    '..' (a manifest naming ``../x`` would have a remote bundle copied, or a local one read, outside its folder)."""
    if not _relative(name):
        raise UserError(f"{uri}: the bundle's {MANIFEST} names the file {name!r}, which is not a path inside the "
                        "bundle (absolute, or with '..'). Fix: re-export the bundle (dlrmflow export); an exported "
                        "manifest never names one.")
    return name


def _relative(name: Any) -> bool:
    """Whether ``name`` is a relative path of plain segments: no leading '/', no '', '.' or '..' segment, no '\\'."""
    return isinstance(name, str) and bool(name) and "\\" not in name and \
        all(part not in ("", ".", "..") for part in name.split("/"))


def predict_split(bundle: Bundle, dataset: str, split: str, parts: str | Path, batch_rows: int = 65536) -> int:
    """Probabilities of every row of an encoded ``split`` with the bundle's module, streamed batch by batch
    into a parts folder of one rank (``training.score.write_scores`` reads it). Returns the row count."""
    from training.data import SplitBinaryDataset
    from training.score import META, part_name

    data = SplitBinaryDataset(dataset, split)
    names = data.spec.categorical_features
    if list(names) != bundle.config["categorical"] or list(data.spec.numerical_features) != bundle.config["numerical"]:
        raise RuntimeError(f"{dataset}: features differ from the bundle's")   # encoded with the bundle's spec: a bug
    predict, parts = bundle.predictor(), Path(parts)
    parts.mkdir(parents=True, exist_ok=True)
    check_free(parts, 4 * data.num_rows, f"the probabilities of {dataset} {split}", "4 bytes a row")
    with writing(parts / part_name(0)), torch.inference_mode(), open(parts / part_name(0), "wb") as f:
        for batch in data.batches(batch_rows):
            kjt = batch.sparse_features
            probs = predict(kjt.values(), kjt.lengths(), batch.dense_features)
            f.write(probs.numpy().astype(np.float32).tobytes())
    write_atomic(parts / META, json.dumps({"rows": data.num_rows, "world_size": 1, "batch_rows": batch_rows}))
    return data.num_rows


def _read_manifest(uri: str) -> dict[str, Any] | None:
    try:
        return json.loads(read_text(posixpath.join(uri, MANIFEST)))
    except FileNotFoundError:
        return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    """The export child of ``export_in_child``: ``export_bundle``, after a ``WRITER`` line with its pid; its
    UserError printed as one line, ``RESULT`` and JSON (``error``; ``no_space``: a NoSpace's what and fix), with exit
    code 2; any other error ends it with its traceback and exit code 1. It dies with the flow's process by its
    command line (``common.process.dying_with_this_process``)."""
    parser = argparse.ArgumentParser(prog="python -P -m training.export", description=export_in_child.__doc__)
    parser.add_argument("run")
    parser.add_argument("step", type=int)
    parser.add_argument("out")
    parser.add_argument("--scratch", help="a local folder for a remote bundle's files before their upload")
    args = parser.parse_args(argv)
    print(f"{WRITER}{os.getpid()}", flush=True)
    try:
        export_bundle(args.run, args.step, args.out, scratch=args.scratch)
    except NoSpace as e:
        print(RESULT + json.dumps({"no_space": [e.what, e.fix]}), flush=True)
        return 2
    except UserError as e:
        print(RESULT + json.dumps({"error": str(e)}), flush=True)
        return 2
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)   # every file is written and closed by now: no interpreter teardown (torch was seen to abort there)
