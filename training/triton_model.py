"""Triton's Python backend for a bundle's PT2 program (copied by ``training.model_repo`` as each model's
``model_repository/<model>/1/model.py``; imports torch and numpy only, nothing of dlrmflow).

The program file is the config's ``program`` parameter, found in the version folder (a repository laid out with its
own copy) or else in the bundle that holds ``model_repository/`` (the model folder's grandparent). Inputs are read by
the names of the config, in its order (the program's arguments); the output is ``probability`` [B] float32.
"""

import json
from pathlib import Path

import numpy as np
import torch
import triton_python_backend_utils as pb_utils   # Triton's Python backend provides it


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        model_dir = Path(args["model_repository"])
        name = config["parameters"]["program"]["string_value"]
        found = [p for p in (model_dir / args["model_version"] / name, model_dir.parents[1] / name) if p.is_file()]
        if not found:
            raise pb_utils.TritonModelException(f"{name} is neither in {model_dir / args['model_version']} nor in "
                                                f"the bundle {model_dir.parents[1]}: copy the bundle's {name} there")
        self.program = torch.export.load(str(found[0])).module()
        self.inputs = [i["name"] for i in config["input"]]
        self.output = config["output"][0]["name"]

    def execute(self, requests):
        responses = []
        with torch.inference_mode():
            for request in requests:
                args = [torch.from_numpy(np.ascontiguousarray(pb_utils.get_input_tensor_by_name(request, n).as_numpy()))
                        for n in self.inputs]
                p = self.program(*args).numpy().astype(np.float32)
                responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(self.output, p)]))
        return responses
