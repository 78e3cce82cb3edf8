"""The serving model: a plain PyTorch DLRM (no TorchRec, no FBGEMM) that a bundle stores as a torch.export program
(and, deprecated, as TorchScript).

``DLRMInference(cfg)`` computes what ``training.dlrm``'s TorchRec DLRM / DLRM_DCN compute, with the same
operations: one embedding bag per categorical pooling a row's ids as the table does (``pooling`` sum or mean; a
single id gives its row), ids taken modulo the table's rows (``IdHasher``'s ``max_table_size`` rule; a no-op
for uncapped tables), the bottom MLP (ReLU after every layer), the dot interaction (``bmm`` + upper triangle,
dense first) or the low-rank DCN, the top MLP (ReLU after all but the last layer), the checkpoint's calibration
of the logit (``training.calibration.affine``, compiled into the TorchScript module; ``a=1, b=0`` without one) and
a sigmoid.
``forward(categorical [B, n_cat] int64, numerical [B, n_num] float32) -> probabilities [B]`` takes one id per
row and feature; ``forward_lists(values, lengths, numerical)`` takes a KeyedJaggedTensor's ``values()`` and
``lengths()`` (multi-valued features: any number of ids a row). ``StaticDLRM`` computes the same with static shapes
(one weight for every table, one ``embedding_bag``), what ``export_program`` exports with ``torch.export`` (a
bundle's ``model.pt2``). This module imports only torch (and the calibration's formula).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from training.calibration import affine


class _Cross(nn.Module):
    """One layer of TorchRec's LowRankCrossNet: x_l + x_0 * (W (V x_l) + b)."""

    def __init__(self, width: int, rank: int):
        super().__init__()
        self.V = nn.Parameter(torch.empty(rank, width))
        self.W = nn.Parameter(torch.empty(width, rank))
        self.b = nn.Parameter(torch.empty(width))

    def forward(self, x0: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return x0 * (nn.functional.linear(nn.functional.linear(x, self.V), self.W) + self.b) + x


class DLRMInference(nn.Module):
    """The DLRM of a model config (``config`` as written to a bundle's model.json, see ``model_config``)."""

    def __init__(self, config: dict[str, Any]):
        super().__init__()
        rows: list[int] = config["table_rows"]
        dim, n_num, n_cat = config["embedding_dim"], len(config["numerical"]), len(rows)
        self.dcn = config["interaction"] == "dcn"
        fitted = config.get("calibration") or {}   # bundles written before calibration: none
        self.calibration_a: float = float(fitted.get("a", 1.0))
        self.calibration_b: float = float(fitted.get("b", 0.0))
        pooling = config.get("pooling") or ["sum"] * n_cat   # bundles written before list features: all sum
        self.tables = nn.ModuleList([nn.EmbeddingBag(r, dim, mode=p) for r, p in zip(rows, pooling)])
        self.register_buffer("rows", torch.tensor(rows, dtype=torch.int64), persistent=False)
        self.bottom = nn.ModuleList(_linears([n_num, *config["bottom_mlp"]]))
        width = (n_cat + 1) * dim if self.dcn else dim + n_cat * (n_cat + 1) // 2   # pairs of [dense, *tables]
        self.cross = nn.ModuleList([_Cross(width, config["dcn_rank"]) for _ in range(config["dcn_layers"])]
                                   if self.dcn else [])
        self.top = nn.ModuleList(_linears([width, *config["top_mlp"]]))
        pairs = torch.triu_indices(n_cat + 1, n_cat + 1, offset=1)
        self.register_buffer("pair_i", pairs[0].contiguous(), persistent=False)
        self.register_buffer("pair_j", pairs[1].contiguous(), persistent=False)

    def forward(self, categorical: torch.Tensor, numerical: torch.Tensor) -> torch.Tensor:
        lengths = torch.ones(categorical.numel(), dtype=torch.int64, device=categorical.device)
        return self.forward_lists(categorical.t().reshape(-1), lengths, numerical)

    @torch.jit.export
    def forward_lists(self, values: torch.Tensor, lengths: torch.Tensor, numerical: torch.Tensor) -> torch.Tensor:
        """Probabilities [B] of B rows given as a KeyedJaggedTensor's ``values()`` (every feature's ids, feature
        by feature) and ``lengths()`` ([n_cat * B]: ids per feature and row, feature-major)."""
        x = self.dense(numerical)
        lengths = lengths.to(torch.int64).view(len(self.tables), -1)
        starts = torch.cumsum(lengths, dim=1) - lengths   # each row's first id within its feature
        ends = torch.cumsum(lengths.sum(dim=1), dim=0)
        embedded = [x.unsqueeze(1)]
        first = 0
        for i, table in enumerate(self.tables):
            last = int(ends[i])
            embedded.append(table(values[first:last] % self.rows[i], starts[i]).unsqueeze(1))
            first = last
        return self.head(x, torch.cat(embedded, dim=1))

    @torch.jit.export
    def dense(self, numerical: torch.Tensor) -> torch.Tensor:
        """The bottom MLP's output [B, dim]."""
        x = numerical
        for linear in self.bottom:
            x = torch.relu(linear(x))
        return x

    @torch.jit.export
    def head(self, x: torch.Tensor, combined: torch.Tensor) -> torch.Tensor:
        """Probabilities [B] from the bottom MLP's output ``x`` and ``combined`` ([B, 1 + n_cat, dim]: ``x`` and
        every table's pooled embedding): interaction, top MLP, calibration, sigmoid."""
        if self.dcn:
            x0 = combined.reshape(combined.shape[0], -1)
            z = x0
            for cross in self.cross:
                z = cross(x0, z)
        else:
            dots = torch.bmm(combined, combined.transpose(1, 2))
            z = torch.cat((x, dots[:, self.pair_i, self.pair_j]), dim=1)
        last = len(self.top) - 1
        for k, top in enumerate(self.top):
            z = top(z)
            if k < last:
                z = torch.relu(z)
        return torch.sigmoid(affine(z.squeeze(-1), self.calibration_a, self.calibration_b))


class StaticDLRM(DLRMInference):
    """``model`` with static shapes, what ``torch.export`` can trace (``DLRMInference`` slices each table's ids by
    the lengths' values, which torch.export cannot): every table's rows in one weight ``[sum of rows, dim]``, each
    id shifted to its table's first row, one ``embedding_bag`` over all ids with the rows' offsets (a cumsum of the
    lengths), mean tables divided by their lengths. Shares ``model``'s MLPs (and its dense/head code); holds the
    tables' weights once more (the one weight)."""

    def __init__(self, model: DLRMInference):
        nn.Module.__init__(self)   # not DLRMInference's: its tables would be allocated again
        self.dcn, self.calibration_a, self.calibration_b = model.dcn, model.calibration_a, model.calibration_b
        self.bottom, self.cross, self.top = model.bottom, model.cross, model.top
        self.tables = nn.ModuleList()   # none: ``weight`` holds them
        rows = model.rows
        self.register_buffer("rows", rows.clone(), persistent=False)
        self.register_buffer("base", torch.cumsum(rows, dim=0) - rows, persistent=False)
        self.register_buffer("mean", torch.tensor([t.mode == "mean" for t in model.tables]), persistent=False)
        self.register_buffer("pair_i", model.pair_i.clone(), persistent=False)
        self.register_buffer("pair_j", model.pair_j.clone(), persistent=False)
        self.weight = nn.Parameter(torch.cat([t.weight.detach() for t in model.tables]), requires_grad=False)

    def forward_lists(self, values: torch.Tensor, lengths: torch.Tensor, numerical: torch.Tensor) -> torch.Tensor:
        lengths = lengths.to(torch.int64).reshape(-1)
        offsets, table = self.layout(lengths, values.shape[0], numerical.shape[0])
        return self.pooled(values.to(torch.int64), table, offsets, lengths, self.dense(numerical))

    def layout(self, lengths: torch.Tensor, n_values: int, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The bags' offsets ``[n_cat * B + 1]`` (a cumsum of the int64 ``lengths``, feature-major) and each of the
        ``n_values`` values' table ``[N]``."""
        n = self.rows.shape[0]
        offsets = torch.cat((torch.zeros(1, dtype=torch.int64, device=lengths.device), torch.cumsum(lengths, dim=0)))
        ends = offsets[torch.arange(1, n + 1, device=lengths.device) * batch]   # each table's last id + 1
        return offsets, torch.searchsorted(ends, torch.arange(n_values, device=lengths.device), right=True)

    def pooled(self, ids: torch.Tensor, table: torch.Tensor, offsets: torch.Tensor, counts: torch.Tensor,
               x: torch.Tensor, weights: torch.Tensor | None = None, fill: torch.Tensor | None = None) -> torch.Tensor:
        """Probabilities [B] from every value's id (int64) and ``table``, the bags' ``offsets``, each bag's count
        of ids (a mean table's divisor) and the bottom MLP's output ``x``. ``weights`` ([N] float32, 0 or 1): which
        values a bag pools (None: all); ``fill`` ([n_cat * B] int64): index-0 rows added to each bag (a missing
        list of a fixed hotness, which preprocessing writes as that many zeros; counted in ``counts`` already)."""
        n, batch = self.rows.shape[0], x.shape[0]
        ids = ids % torch.index_select(self.rows, 0, table) + torch.index_select(self.base, 0, table)
        pooled = self.bags(ids, offsets, weights)
        if fill is not None:   # each table's row of index 0 (at its base), fill times
            first = self.first_rows().unsqueeze(1)   # [n_cat, 1, dim]
            pooled = pooled + (fill.view(n, batch, 1).to(pooled.dtype) * first).reshape(pooled.shape)
        counts = torch.where(self.mean.unsqueeze(1), counts.view(n, batch).clamp(min=1), 1).to(pooled.dtype)
        pooled = pooled.view(n, batch, -1) / counts.unsqueeze(2)
        return self.head(x, torch.cat((x.unsqueeze(1), pooled.transpose(0, 1)), dim=1))

    def bags(self, ids: torch.Tensor, offsets: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
        """The sum of each bag's rows of ``weight`` ([n_cat * B, dim]; ``ids`` already shifted to their tables):
        the one lookup, which ``training.quantize.Int8DLRM`` does over int8 rows."""
        return nn.functional.embedding_bag(ids, self.weight, offsets, mode="sum", per_sample_weights=weights,
                                           include_last_offset=True)

    def first_rows(self) -> torch.Tensor:
        """Each table's row of index 0 ``[n_cat, dim]``."""
        return self.weight[self.base]


class ListsInput(nn.Module):
    """``model.forward_lists`` as a forward: what ``export_program`` exports for a model with list features."""

    def __init__(self, model: DLRMInference):
        super().__init__()
        self.model = model

    def forward(self, values: torch.Tensor, lengths: torch.Tensor, numerical: torch.Tensor) -> torch.Tensor:
        return self.model.forward_lists(values, lengths, numerical)


def export_program(model: DLRMInference, sample: tuple[torch.Tensor, ...]) -> torch.export.ExportedProgram:
    """``model`` (or its ``StaticDLRM`` already: a ``training.quantize.Int8DLRM`` too) as a ``torch.export``
    program with a dynamic batch (and, for lists, a dynamic values length), traced on ``sample``: ``(categorical,
    numerical)`` (one id per row and feature: ``forward``) or ``(values, lengths, numerical)`` (``forward_lists``).
    The sample's batch and values length must be 2 or more (torch.export specializes a size of 0 or 1)."""
    batch = torch.export.Dim("batch", min=1)
    model = (model if isinstance(model, StaticDLRM) else StaticDLRM(model)).eval()
    if len(sample) == 2:
        return torch.export.export(model, sample, dynamic_shapes=({0: batch}, {0: batch}), strict=False)
    values = torch.export.Dim("values", min=1)   # an empty batch of lists (no value at all) is not served
    shapes = ({0: values}, {0: int(model.rows.shape[0]) * batch}, {0: batch})
    return torch.export.export(ListsInput(model), sample, dynamic_shapes=shapes, strict=False)


def _linears(sizes: list[int]) -> list[nn.Linear]:
    return [nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])]


def plain_state(torchrec_state: dict[str, torch.Tensor], table_names: list[str]) -> dict[str, torch.Tensor]:
    """A TorchRec DLRM's unsharded state dict (keys of ``DLRM``/``DLRM_DCN``) as ``DLRMInference``'s, float32.
    ``table_names``: the embedding tables in the order of the categorical features."""
    out: dict[str, torch.Tensor] = {}
    tables = {name: i for i, name in enumerate(table_names)}
    top = sorted({k for k in torchrec_state if k.startswith("over_arch.model.0._mlp.")})
    n_hidden = len({k.split(".")[4] for k in top})
    for key, value in torchrec_state.items():
        part = key.split(".")
        if key.startswith("sparse_arch.embedding_bag_collection.embedding_bags."):
            name = f"tables.{tables[part[3]]}.weight"
        elif key.startswith("dense_arch.model._mlp."):
            name = f"bottom.{part[3]}.{part[-1]}"
        elif key.startswith("over_arch.model.0._mlp."):
            name = f"top.{part[4]}.{part[-1]}"
        elif key.startswith("over_arch.model.1."):
            name = f"top.{n_hidden}.{part[-1]}"
        elif key.startswith("inter_arch.crossnet."):
            kind = {"V_kernels": "V", "W_kernels": "W", "bias": "b"}[part[2]]
            name = f"cross.{part[3]}.{kind}"
        else:
            raise KeyError(f"unexpected key in the model's state: {key}")   # a model this module does not mirror
        out[name] = value.detach().to(torch.float32).contiguous()
    return out
