"""The bundle's serving formats on the CPU, for one Criteo-shaped model with random weights: TorchScript
(``model.pt``, deprecated: the baseline), the torch.export program on vocabulary indices (``model.pt2``,
``training.export.write_program``), the same with int8 embedding rows (``model.pt2`` of ``--quantize int8``,
``training.quantize``), and the program on raw rows (``raw.pt2``, ``training.raw_inputs``) alone (its inputs made
beforehand) and with its client's parsing (``client.py``: the rows as dicts of strings -> tensors, every call).

For each format: the file's bytes, the export time (script + save; export + save, without the verification), the load
time (``torch.jit.load``; ``torch.export.load(...).module()``), the p50 and p99 latency of one row (of ``--calls``
calls) and the rows/s of a ``--big``-row batch (4096; median of ``--batches`` calls), one id a row and feature
(``forward``) or, with ``--lists``, 0..2x``--hotness`` ids a row and feature (``forward_lists``; no raw formats). The
raw program's vocabularies keep every table's rows but index 0 (hex keys; 60% of a row's keys kept, 5% missing).
Threads: torch's default (set OMP_NUM_THREADS). Prints one JSON line per format, then the machine (CPU, cores, load
average, date) and a Markdown table.

usage: OMP_NUM_THREADS=1 python benchmarks/bench_serve.py [--tables 26] [--rows 20000] [--dim 64] [--lists]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run as a script from anywhere

from training import raw_client  # noqa: E402
from training.export import JIT_DEPRECATED, sample_inputs  # noqa: E402
from training.inference import DLRMInference, export_program  # noqa: E402
from training.quantize import quantize_int8  # noqa: E402
from training.raw_inputs import RAW_CONFIG, export_raw, sample_raw  # noqa: E402

FORMATS = ("torchscript", "pt2", "pt2-int8", "raw", "raw+client")
FILES = {"torchscript": "model.pt", "pt2": "model.pt2", "pt2-int8": "model-int8.pt2", "raw": "raw.pt2",
         "raw+client": "raw.pt2"}


def _inputs(module: DLRMInference, lists: bool, rows: int, hotness: int, seed: int) -> tuple[torch.Tensor, ...]:
    if not lists:
        return sample_inputs(module, False, rows, seed)
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 2 * hotness + 1, (int(module.rows.shape[0]) * rows,), generator=g)
    lengths[0] = max(int(lengths[0]), 1)
    numerical = torch.rand(rows, module.bottom[0].in_features, generator=g)
    return torch.randint(0, 1 << 20, (int(lengths.sum()),), generator=g), lengths, numerical


def _latencies(fn, calls: int) -> list[float]:
    """Seconds of each of ``calls`` calls of ``fn`` (after 3 warm-up calls)."""
    for _ in range(3):
        fn()
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return seconds


def _raw_plan(tables: int, rows: int, seed: int) -> tuple[dict, dict]:
    """A Criteo-like raw plan (26 hex features, 13 log1p numericals) and each feature's kept keys: rows - 1 distinct
    32-bit keys, indices 1..rows-1."""
    g = np.random.default_rng(seed)
    cats, keys = [], {}
    for i in range(tables):
        kept = np.sort(g.choice(1 << 32, size=rows - 1, replace=False).astype(np.int64))
        keys[f"C{i + 1}"] = (kept, g.permutation(np.arange(1, rows, dtype=np.int64)))
        cats.append({"name": f"C{i + 1}", "hotness": 1, "max_hotness": None, "sep": None, "key": "hex",
                     "kept": rows - 1})
    plan = {"format": 1, "numerical_dtype": "float16", "null_values": [], "categorical": cats,
            "numerical": [{"name": f"I{i + 1}", "transform": "log1p"} for i in range(13)]}
    return plan, keys


def _raw_rows(plan: dict, keys: dict, n: int, seed: int) -> list[dict[str, str]]:
    """``n`` rows as a Criteo reader gives them: strings, 60% of the keys kept, 5% of the fields empty."""
    g = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        row = {c["name"]: ("" if g.random() < 0.05 else
                           f"{int(g.choice(keys[c['name']][0]) if g.random() < 0.6 else g.integers(0, 1 << 32)):08x}")
               for c in plan["categorical"]}
        row.update({x["name"]: "" if g.random() < 0.05 else str(int(g.integers(0, 1000))) for x in plan["numerical"]})
        rows.append(row)
    return rows


def bench(args: argparse.Namespace) -> list[dict]:
    config = {"interaction": "dot", "embedding_dim": args.dim, "bottom_mlp": [512, 256, args.dim],
              "top_mlp": [512, 256, 1], "dcn_layers": 0, "dcn_rank": 0, "numerical": [f"I{i}" for i in range(13)],
              "table_rows": [args.rows] * args.tables, "calibration": {"a": 1.1, "b": -0.1}}
    torch.manual_seed(0)
    module = DLRMInference(config).eval()
    one, big = (_inputs(module, args.lists, n, args.hotness, seed) for n, seed in ((1, 1), (args.big, 2)))
    formats = [f for f in FORMATS if not (args.lists and f.startswith("raw"))]
    results = []
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings(), torch.inference_mode():
        warnings.filterwarnings("ignore", JIT_DEPRECATED)
        folder = Path(tmp)
        if not args.lists:
            plan, keys = _raw_plan(args.tables, args.rows, 3)
            (folder / RAW_CONFIG).write_text(json.dumps(plan))
            client = raw_client.Client(folder)
            text_one, text_big = _raw_rows(plan, keys, 1, 4), _raw_rows(plan, keys, args.big, 5)
            raw_one, raw_big = client.tensors(text_one), client.tensors(text_big)
        for kind in formats:
            path = folder / FILES[kind]
            start = time.perf_counter()
            if kind == "torchscript":
                torch.jit.save(torch.jit.script(module), str(path))
            elif kind == "raw+client":
                pass   # the raw program written for "raw"
            else:
                with torch.inference_mode(False), torch.no_grad():
                    served = quantize_int8(module) if kind == "pt2-int8" else module
                    program = export_raw(served, plan, keys, sample_raw(plan, keys, 8, 0)) if kind == "raw" else \
                        export_program(served, _inputs(module, args.lists, 8, args.hotness, 0))
                torch.export.save(program, str(path))
            exported = time.perf_counter() - start
            start = time.perf_counter()
            if kind == "torchscript":
                loaded = torch.jit.load(str(path)).eval()
                model = loaded.forward_lists if args.lists else loaded
            else:
                model = torch.export.load(str(path)).module()
            load = time.perf_counter() - start
            if kind == "raw":
                small, large = (lambda: model(*raw_one)), (lambda: model(*raw_big))
            elif kind == "raw+client":
                small, large = (lambda: model(*client.tensors(text_one))), (lambda: model(*client.tensors(text_big)))
            else:
                small, large = (lambda: model(*one)), (lambda: model(*big))
            batch1 = _latencies(small, args.calls)
            per_batch = statistics.median(_latencies(large, args.batches))
            p99 = float(np.percentile(batch1, 99))
            results.append({"format": kind, "file": FILES[kind], "lists": args.lists, "tables": args.tables,
                            "rows": args.rows, "dim": args.dim, "threads": torch.get_num_threads(),
                            "bytes": path.stat().st_size, "export_s": round(exported, 3), "load_s": round(load, 3),
                            "p50_batch1_ms": round(statistics.median(batch1) * 1e3, 3),
                            "p99_batch1_ms": round(p99 * 1e3, 3), "batch": args.big,
                            "rows_per_s": round(args.big / per_batch)})
    return results


def machine() -> str:
    """The CPU, its cores, the load average and the time: what the numbers were measured on."""
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor()) if os.path.exists("/proc/cpuinfo") else platform.processor()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"{cpu}, {os.cpu_count()} cores, load average {load}, torch {torch.__version__}, "
            f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=26)
    parser.add_argument("--rows", type=int, default=20000, help="rows of each table")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--lists", action="store_true", help="list features (forward_lists; no raw formats)")
    parser.add_argument("--hotness", type=int, default=3, help="with --lists: the mean ids a row and feature")
    parser.add_argument("--calls", type=int, default=300, help="batch-1 calls")
    parser.add_argument("--batches", type=int, default=20, help="big-batch calls")
    parser.add_argument("--big", type=int, default=4096, help="rows of the big batch")
    results = bench(parser.parse_args(argv))
    for r in results:
        print(json.dumps(r))
    base = results[0]
    print(f"\nbench_serve: {machine()}")
    print(f"\n| format | file MB | export s | load s | p50 batch 1 ms | p99 batch 1 ms | rows/s batch {base['batch']} "
          "| vs TorchScript |\n|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['format']} | {r['bytes'] / 1e6:.1f} | {r['export_s']} | {r['load_s']} | {r['p50_batch1_ms']} | "
              f"{r['p99_batch1_ms']} | {r['rows_per_s']:,} | {r['rows_per_s'] / base['rows_per_s']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
