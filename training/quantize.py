"""Optional int8 embeddings of a serving bundle (``dlrmflow export --quantize int8``): the tables of a
``StaticDLRM`` as row-wise 8-bit integers, what its ``model.pt2`` and ``raw.pt2`` then hold instead of float32 rows.

Each row of the one embedding weight is stored as ``dim`` uint8 codes and its own float32 scale and offset (its
minimum): ``row ~ code * scale + minimum``, an error of at most half a step (``(max - min) / 510``) per value. The
format and the lookup are ATen's ``quantized::embedding_bag_byte_prepack`` and
``quantized::embedding_bag_byte_rowwise_offsets`` (FBGEMM's 8-bit row-wise kernels, built into PyTorch's CPU
library), so the program stays a plain ``torch.export`` program that loads with PyTorch alone, and pools in one fused
call without making the float rows (``Int8DLRM.bags``). A row takes ``dim + 8`` bytes instead of ``4 * dim``: 2.7x
smaller at dim 16, 3.6x at 64. Measured on the CPU (PyTorch registers CUDA kernels of both ops too; untried). The
MLPs stay float32; so do ``weights.pt`` and the deprecated ``model.pt`` (the checkpoint's own weights). Why this
rather than TorchRec's ``quantize_inference_model`` or a dequantizing gather: docs/serving.md, "int8 embeddings".
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import nn

from training.inference import DLRMInference, StaticDLRM

QUANTIZE = ("none", "int8")   # the export's choices (``ExportConfig.quantize``)
SCHEME = "row-wise uint8, a float32 scale and minimum per row (quantized::embedding_bag_byte_rowwise_offsets)"


class Int8DLRM(StaticDLRM):
    """``static`` (a ``StaticDLRM``) with its embedding rows quantized (see the module doc); the MLPs shared."""

    def __init__(self, static: StaticDLRM):
        nn.Module.__init__(self)   # not StaticDLRM's: it would concatenate the tables again
        self.dcn, self.calibration_a, self.calibration_b = static.dcn, static.calibration_a, static.calibration_b
        self.bottom, self.cross, self.top, self.tables = static.bottom, static.cross, static.top, nn.ModuleList()
        for name in ("rows", "base", "mean", "pair_i", "pair_j"):
            self.register_buffer(name, getattr(static, name).clone(), persistent=False)
        packed = torch.ops.quantized.embedding_bag_byte_prepack(static.weight.detach().contiguous())
        self.register_buffer("packed", packed)   # [rows, dim + 8] uint8: the codes, then scale and minimum
        # index 0's rows as the lookup dequantizes them (a missing list of a fixed hotness pools them)
        self.register_buffer("first", torch.ops.quantized.embedding_bag_byte_unpack(packed)[static.base])

    def bags(self, ids: torch.Tensor, offsets: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
        return torch.ops.quantized.embedding_bag_byte_rowwise_offsets(
            self.packed, ids, offsets, False, 0, False, weights, None, True)   # mode 0: sum; include the last offset

    def first_rows(self) -> torch.Tensor:
        return self.first


def quantize_int8(module: DLRMInference) -> Int8DLRM:
    """``module`` (a ``DLRMInference`` or its ``StaticDLRM``) with int8 embedding rows, in eval mode."""
    static = module if isinstance(module, StaticDLRM) else StaticDLRM(module)
    return Int8DLRM(static.eval()).eval()


def manifest_entry(module: DLRMInference, quantized: Int8DLRM, samples: Sequence[tuple[torch.Tensor, ...]],
                   lists: bool) -> dict[str, Any]:
    """The manifest's ``quantize``: the scheme, the tables' bytes in float32 and int8, and the largest difference of
    the quantized model's probabilities from the float model's on ``samples`` (random rows: the tests measure it on
    real ones)."""
    diff = 0.0
    with torch.no_grad():
        for inputs in samples:
            want = module.forward_lists(*inputs) if lists else module(*inputs)
            got = quantized.forward_lists(*inputs) if lists else quantized(*inputs)
            diff = max(diff, float((got - want).abs().max()))
    rows, dim = int(quantized.packed.shape[0]), int(quantized.packed.shape[1]) - 8
    return {"kind": "int8", "scheme": SCHEME,
            "tables_bytes": {"float32": rows * dim * 4, "int8": quantized.packed.numel()},
            "max_abs_diff_vs_float": diff}
