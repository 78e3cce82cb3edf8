"""Int8 embeddings (`dlrmflow export --quantize int8`, training.quantize), on the model trained on real Criteo rows:
the bundle's model.pt2 is smaller than the float program by what its tables save (2.7x at dim 16), its AUC on the
777 raw test rows is the float model's within 0.001 (its probabilities do differ), the manifest says so; and `score
--bundle` (which runs model.pt2 on preprocessing's encoding) gives the probabilities that the bundle's served program,
raw.pt2 fed by its client.py, gives on the same rows: quantized in both, so scoring and serving cannot disagree. The
int8 module computes what the float one computes with the dequantized rows (lists with per-value weights and fill
rows, mean tables, DCN)."""

from __future__ import annotations

import csv
import json

import numpy as np
import polars as pl
import pytest
import torch

import feature_spec as fspec
from models.config import ScoreConfig
from models.scoring import score
from training import raw_client
from training.export import build_module, export_bundle, model_config, unsharded_state, write_program
from training.metrics import compute_metrics
from training.rundir import RunDir


@pytest.mark.timeout(600)
def test_an_int8_bundle_is_smaller_keeps_the_auc_and_scores_as_it_serves(criteo, criteo_run, tmp_path):
    run, step = str(criteo_run["run"]), criteo_run["evaluation"]["step"]
    bundle = tmp_path / "int8"
    manifest = export_bundle(run, step, str(bundle), quantize="int8")
    quantized = manifest["quantize"]
    assert quantized["kind"] == "int8" and quantized["files"] == ["model.pt2", "raw.pt2"]
    assert manifest["program"]["max_abs_diff"] <= 1e-5 and manifest["raw"]["max_abs_diff"] <= 1e-5   # exported as is
    tables = quantized["tables_bytes"]
    dim = json.loads((bundle / "model.json").read_text())["embedding_dim"]
    assert tables["float32"] / tables["int8"] == pytest.approx(4 * dim / (dim + 8))   # 2.7x at dim 16

    module = build_module(model_config(RunDir(run), step), unsharded_state(run, step))
    write_program(module, False, tmp_path / "float.pt2")
    float_bytes, int8_bytes = (tmp_path / "float.pt2").stat().st_size, (bundle / "model.pt2").stat().st_size
    # the program is smaller by what its tables are (this tiny model's graph and MLPs are a third of it)
    assert float_bytes - int8_bytes == pytest.approx(tables["float32"] - tables["int8"], rel=0.05)

    raw = criteo["raw"]["test"]
    out = tmp_path / "scores.parquet"
    summary = score(ScoreConfig(bundle=str(bundle), inputs=[str(raw)], out=str(out), progress=False),
                    on_line=lambda _: None)
    p_int8 = pl.read_parquet(out).sort("row")["probability"].to_numpy()
    p_float, labels = criteo_run["p"], criteo_run["y"]   # the checkpoint's (= the float bundle's) of the same rows
    assert len(p_int8) == len(p_float) == summary["rows"] == 777
    auc_float = compute_metrics(p_float, labels)["auc"]
    drop = auc_float - summary["auc"]
    print(f"\nint8 on {len(labels)} real Criteo rows: auc {summary['auc']:.5f} (float {auc_float:.5f}, drop "
          f"{drop:.5f}); model.pt2 {int8_bytes:,} bytes (float {float_bytes:,}: {float_bytes / int8_bytes:.2f}x); "
          f"tables {tables['float32'] / tables['int8']:.2f}x; max |p - p_float| {np.abs(p_int8 - p_float).max():.2e}")
    assert abs(drop) <= 0.001
    assert 0 < np.abs(p_int8 - p_float).max() < 0.05   # quantized: not the float model's probabilities, near them

    with open(raw, newline="") as f:
        rows = list(csv.DictReader(f, fieldnames=list(fspec.CRITEO_COLUMNS), delimiter="\t", quoting=csv.QUOTE_NONE))
    program = torch.export.load(str(bundle / "raw.pt2")).module()
    with torch.inference_mode():
        served = program(*raw_client.Client(bundle).tensors(rows)).numpy()
    np.testing.assert_allclose(served, p_int8, rtol=0, atol=1e-6)


DCN_LISTS = {"interaction": "dcn", "embedding_dim": 8, "bottom_mlp": [8], "top_mlp": [16, 1], "dcn_layers": 2,
             "dcn_rank": 4, "numerical": ["n0", "n1"], "table_rows": [50, 7, 300], "pooling": ["sum", "mean", "sum"],
             "calibration": {"a": 1.3, "b": -0.2}}


def test_the_int8_model_is_the_float_model_of_its_dequantized_rows():
    """Int8DLRM computes what the float StaticDLRM computes with the rows the int8 codes stand for: for lists with
    per-value weights (max_hotness) and index-0 fill rows (missing fixed-hotness lists), mean and sum tables, DCN."""
    from training.inference import DLRMInference, StaticDLRM
    from training.quantize import quantize_int8

    torch.manual_seed(0)
    module = DLRMInference(DCN_LISTS).eval()
    for p in module.parameters():
        torch.nn.init.normal_(p, std=0.3)
    quantized = quantize_int8(module)
    dequantized = StaticDLRM(module).eval()
    dequantized.weight.data = torch.ops.quantized.embedding_bag_byte_unpack(quantized.packed)
    assert quantized.packed.dtype == torch.uint8 and quantized.packed.shape == (357, 8 + 8)
    assert 0 < float((dequantized.weight - StaticDLRM(module).weight).abs().max()) < 0.01   # half a step at most

    g = torch.Generator().manual_seed(1)
    batch, n = 9, 3
    lengths = torch.randint(0, 4, (n * batch,), generator=g)
    ids = torch.randint(0, 1 << 20, (int(lengths.sum()),), generator=g)
    weights = (torch.rand(len(ids), generator=g) > 0.3).float()
    fill = torch.where(lengths == 0, 2, 0)
    numerical = torch.rand(batch, 2, generator=g)
    offsets, table = quantized.layout(lengths, len(ids), batch)
    with torch.no_grad():
        for predict in (lambda m: m.pooled(ids, table, offsets, lengths + fill, m.dense(numerical), weights, fill),
                        lambda m: m.forward_lists(ids, lengths, numerical)):
            got, want = predict(quantized), predict(dequantized)
            assert float(want.std()) > 1e-3
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=0, atol=1e-6)
