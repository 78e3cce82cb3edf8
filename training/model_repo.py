"""A bundle's model repository: what a model server speaking the Open Inference Protocol (KServe v2, Triton HTTP/gRPC)
serves it as, written by the export (``write_repository``) into the bundle's ``model_repository/`` folder:

    model_repository/dlrm/config.pbtxt       the program on vocabulary indices (model.pt2)
    model_repository/dlrm/1/model.py         Triton's Python backend: the bundle's model.pt2, torch.export.load-ed
    model_repository/dlrm_raw/config.pbtxt   the program on raw rows (raw.pt2), where the bundle has one
    model_repository/dlrm_raw/1/model.py

Why the Python backend: Triton's PyTorch backend loads TorchScript (``platform: "pytorch_libtorch"``) or an
AOTInductor package (``platform: "torch_aoti"``, beta since 26.03, one row a request, compiled for one device), not a
``torch.export.save`` program; its Python backend runs the program as `dlrmflow score` does. ``model.py`` is a copy of
``training/triton_model.py`` (torch and numpy only) and finds the program in its version folder, else in the bundle
that holds the repository (no second copy of the weights). Every tensor keeps the program's name, dtype and shape: a
dimension -1 is dynamic (rows, or values); ``max_batch_size: 0``, so the client sends whole batches as they are
(``training.model_server`` answers the same names, dtypes and shapes). The output is ``probability`` [B] float32.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

# inside the bundle; not "triton": the bundle is put on sys.path to import client.py, and torch imports "triton"
FOLDER = "model_repository"
MODEL, RAW_MODEL = "dlrm", "dlrm_raw"   # the served models' names: the program on indices, the one on raw rows
OUTPUT = "probability"
BACKEND = Path(__file__).with_name("triton_model.py")   # copied as each model's 1/model.py
V2_TYPES = {"int64": "INT64", "float32": "FP32", "float64": "FP64", "bool": "BOOL"}   # numpy/torch -> v2 datatype


def tensors(inputs: dict[str, list], n_num: int) -> list[dict[str, Any]]:
    """The v2 inputs of a program from its manifest entry's ``inputs`` (``{name: [dtype, size]}``): name, v2
    datatype and shape (-1: dynamic), in the program's argument order. A size that is a number, or ``n_num`` (the
    model's ``n_num`` numericals), is a row's width (``[-1, n]``); a formula (``N``, ``n_cat * B``) is a flat dynamic
    length (``[-1]``)."""
    def shape(size: int | str) -> list[int]:
        return [-1, size] if isinstance(size, int) else [-1, n_num] if size == "n_num" else [-1]

    return [{"name": name, "datatype": V2_TYPES[dtype], "shape": shape(size)} for name, (dtype, size) in inputs.items()]


def config_pbtxt(name: str, program: str, inputs: list[dict[str, Any]]) -> str:
    """Triton's ``config.pbtxt`` of the model ``name`` running the bundle's ``program`` file on ``inputs`` (v2
    tensors: ``tensors``): Python backend, no server-side batching (``max_batch_size: 0``: a list model's inputs are not
    one row a batch index)."""
    def entry(t: dict[str, Any]) -> str:
        dims = ", ".join(str(d) for d in t["shape"])
        return f'  {{ name: "{t["name"]}" data_type: TYPE_{t["datatype"]} dims: [ {dims} ] }}'

    inputs_text = ",\n".join(entry(t) for t in inputs)
    return (f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\ninput [\n{inputs_text}\n]\n'
            f'output [\n  {{ name: "{OUTPUT}" data_type: TYPE_FP32 dims: [ -1 ] }}\n]\n'
            'instance_group [ { kind: KIND_CPU } ]\n'
            f'parameters {{ key: "program" value: {{ string_value: "{program}" }} }}\n')


def write_repository(folder: Path, program: dict[str, Any], raw: dict[str, Any]) -> dict[str, Any]:
    """The model repository of the bundle in ``folder`` (its ``model_repository/``, see the module doc) for its
    program entry and raw entry (the manifest's ``program`` and ``raw``); returns the manifest's ``serving`` entry: the
    repository's folder and each model's name, program file and v2 inputs."""
    models = {MODEL: program}
    if raw.get("file"):
        models[RAW_MODEL] = raw
    served, n_num = {}, program["inputs"]["numerical"][1]
    for name, entry in models.items():
        version, inputs = folder / FOLDER / name / "1", tensors(entry["inputs"], n_num)
        version.mkdir(parents=True, exist_ok=True)
        (folder / FOLDER / name / "config.pbtxt").write_text(config_pbtxt(name, entry["file"], inputs))
        shutil.copyfile(BACKEND, version / "model.py")
        served[name] = {"program": entry["file"], "inputs": inputs,
                        "output": {"name": OUTPUT, "datatype": "FP32", "shape": [-1]}}
    return {"repository": FOLDER, "protocol": "v2 (Open Inference Protocol)", "served": served}
