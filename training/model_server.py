"""A bundle served by KServe's Python model server over the Open Inference Protocol (v2: KServe, Triton's HTTP and
gRPC API; `dlrmflow serve-model`): the models of the bundle's repository (``training.model_repo``), ``dlrm`` (the
program on vocabulary indices, ``model.pt2``) and, where the bundle has one, ``dlrm_raw`` (the program on raw rows,
``raw.pt2``, fed by the bundle's ``client.py``), each a ``kserve.Model`` that runs the PT2 program with torch.

A request names its inputs as the repository's ``config.pbtxt`` does (the program's arguments: ``categorical`` and
``numerical``, or ``values``, ``lengths`` and ``numerical``; the raw program's ``values``, ``lengths``, ``missing``,
``numerical``), with their v2 datatypes; the answer is ``probability`` [B] FP32, what `dlrmflow score --bundle` gives.
A missing input, another datatype or a row of another width is a 400 naming it.
"""

from __future__ import annotations

import socket
import tempfile
import uuid
from pathlib import Path
from typing import Any

import kserve
import numpy as np
import torch
from kserve.errors import InvalidInput

from common.errors import UserError
from training.export import load_bundle

DEFAULT_PORT = 8080


class ProgramModel(kserve.Model):
    """One PT2 program of a bundle as a v2 model: ``inputs`` as the manifest's ``serving`` entry lists them."""

    def __init__(self, name: str, program: Path, inputs: list[dict[str, Any]], output: dict[str, Any]):
        super().__init__(name)
        self.path, self.inputs, self.output, self.program = program, inputs, output, None

    def load(self) -> bool:
        self.program = torch.export.load(str(self.path)).module()
        self.ready = True
        return self.ready

    def get_input_types(self) -> list[dict[str, Any]]:
        return self.inputs   # the model's v2 metadata (GET /v2/models/NAME): config.pbtxt's inputs

    def get_output_types(self) -> list[dict[str, Any]]:
        return [self.output]

    def arguments(self, request: kserve.InferRequest) -> list[torch.Tensor]:
        """The program's arguments from ``request``'s inputs (InvalidInput: one missing, of another datatype, or of
        another shape than the repository's)."""
        given = {i.name: i for i in request.inputs}
        args = []
        for want in self.inputs:
            found = given.get(want["name"])
            if found is None:
                raise InvalidInput(f"model {self.name}: no input {want['name']!r} (it takes "
                                   f"{', '.join(t['name'] for t in self.inputs)})")
            if found.datatype != want["datatype"]:
                raise InvalidInput(f"model {self.name}: input {want['name']!r} is {found.datatype}, "
                                   f"it takes {want['datatype']}")
            array = np.ascontiguousarray(found.as_numpy())
            if array.ndim != len(want["shape"]) or any(w != -1 and a != w for a, w in zip(array.shape, want["shape"])):
                raise InvalidInput(f"model {self.name}: input {want['name']!r} has shape {list(array.shape)}, "
                                   f"it takes {want['shape']} (-1: any)")
            args.append(torch.from_numpy(array))
        return args

    def predict(self, payload: kserve.InferRequest, headers: dict[str, str] | None = None,
                response_headers: dict[str, str] | None = None) -> kserve.InferResponse:
        args = self.arguments(payload)
        with torch.inference_mode():
            p = self.program(*args).numpy().astype(np.float32)
        out = kserve.InferOutput(name=self.output["name"], shape=list(p.shape), datatype="FP32")
        out.set_data_from_numpy(p, binary_data=False)
        return kserve.InferResponse(model_name=self.name, infer_outputs=[out],
                                    response_id=payload.id or str(uuid.uuid4()))   # tritonclient sends no id


def bundle_models(bundle: str, cache: str | Path | None = None) -> list[ProgramModel]:
    """The loaded models of the bundle at ``bundle`` (every file checked against its manifest; a remote bundle copied
    into ``cache``). UserError for a bundle exported before its repository was written."""
    found = load_bundle(bundle, cache=cache)
    serving = found.manifest.get("serving")
    if not serving:
        raise UserError(f"{bundle}: the bundle has no model repository (its manifest has no 'serving'), it was "
                        "exported before dlrmflow wrote one. Fix: re-export it (dlrmflow export).")
    models = [ProgramModel(name, found.folder / m["program"], m["inputs"], m["output"])
              for name, m in serving["served"].items()]
    for model in models:
        model.load()
    return models


def serve_bundle(bundle: str, port: int = DEFAULT_PORT) -> None:
    """Serve the bundle's models (``bundle_models``) on ``port`` (HTTP, every interface) until SIGINT or SIGTERM.
    UserError for a port taken or not ours to bind, before the bundle is loaded."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as uvicorn binds it
        try:
            probe.bind(("0.0.0.0", port))
        except OSError as e:
            raise UserError(f"cannot serve on port {port}: {e.strerror}. Fix: pass a free port (--port N).") from None
    with tempfile.TemporaryDirectory(prefix="dlrmflow-serve-model-") as cache:
        models = bundle_models(bundle, cache)
        kserve.ModelServer(http_port=port, enable_grpc=False, workers=1).start(models)
