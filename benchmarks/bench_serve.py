"""The bundle's two serving formats on the CPU: TorchScript (``model.pt``, deprecated) against the torch.export
program (``model.pt2``, ``training.export.write_program``), for one Criteo-shaped model with random weights.

For each format: the export time (script + save; export + save, without the verification), the load time
(``torch.jit.load``; ``torch.export.load(...).module()``), the median latency of one row (p50 of ``--calls`` calls)
and the rows/s of a 4096-row batch (median of ``--batches`` calls), one id a row and feature (``forward``) or, with
``--lists``, 0..2x``--hotness`` ids a row and feature (``forward_lists``). Threads: torch's default (set
OMP_NUM_THREADS). Prints one JSON line per format, then a Markdown table.

usage: OMP_NUM_THREADS=1 python benchmarks/bench_serve.py [--tables 26] [--rows 20000] [--dim 64] [--lists]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch

from training.export import JIT_DEPRECATED, sample_inputs
from training.inference import DLRMInference, export_program


def _inputs(module: DLRMInference, lists: bool, rows: int, hotness: int, seed: int) -> tuple[torch.Tensor, ...]:
    if not lists:
        return sample_inputs(module, False, rows, seed)
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 2 * hotness + 1, (int(module.rows.shape[0]) * rows,), generator=g)
    lengths[0] = max(int(lengths[0]), 1)
    numerical = torch.rand(rows, module.bottom[0].in_features, generator=g)
    return torch.randint(0, 1 << 20, (int(lengths.sum()),), generator=g), lengths, numerical


def _time(fn, calls: int) -> float:
    """Median seconds of ``calls`` calls of ``fn`` (after 3 warm-up calls)."""
    for _ in range(3):
        fn()
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def bench(args: argparse.Namespace) -> list[dict]:
    config = {"interaction": "dot", "embedding_dim": args.dim, "bottom_mlp": [512, 256, args.dim],
              "top_mlp": [512, 256, 1], "dcn_layers": 0, "dcn_rank": 0, "numerical": [f"I{i}" for i in range(13)],
              "table_rows": [args.rows] * args.tables, "calibration": {"a": 1.1, "b": -0.1}}
    torch.manual_seed(0)
    module = DLRMInference(config).eval()
    one, big = (_inputs(module, args.lists, n, args.hotness, seed) for n, seed in ((1, 1), (4096, 2)))
    results = []
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings(), torch.inference_mode():
        warnings.filterwarnings("ignore", JIT_DEPRECATED)
        for kind in ("torchscript", "pt2"):
            path = Path(tmp) / ("model.pt" if kind == "torchscript" else "model.pt2")
            start = time.perf_counter()
            if kind == "torchscript":
                torch.jit.save(torch.jit.script(module), str(path))
            else:
                with torch.inference_mode(False), torch.no_grad():
                    program = export_program(module, _inputs(module, args.lists, 8, args.hotness, 0))
                torch.export.save(program, str(path))
            exported = time.perf_counter() - start
            start = time.perf_counter()
            if kind == "torchscript":
                loaded = torch.jit.load(str(path)).eval()
                model = loaded.forward_lists if args.lists else loaded
            else:
                model = torch.export.load(str(path)).module()
            load = time.perf_counter() - start
            p50 = _time(lambda: model(*one), args.calls)
            per_batch = _time(lambda: model(*big), args.batches)
            results.append({"format": kind, "lists": args.lists, "tables": args.tables, "rows": args.rows,
                            "dim": args.dim, "threads": torch.get_num_threads(), "bytes": path.stat().st_size,
                            "export_s": round(exported, 3), "load_s": round(load, 3),
                            "p50_batch1_ms": round(p50 * 1e3, 3), "rows_per_s_4096": round(4096 / per_batch)})
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=26)
    parser.add_argument("--rows", type=int, default=20000, help="rows of each table")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--lists", action="store_true", help="list features (forward_lists)")
    parser.add_argument("--hotness", type=int, default=3, help="with --lists: the mean ids a row and feature")
    parser.add_argument("--calls", type=int, default=300, help="batch-1 calls")
    parser.add_argument("--batches", type=int, default=20, help="4096-row calls")
    results = bench(parser.parse_args())
    for r in results:
        print(json.dumps(r))
    print("\n| format | export s | load s | p50 batch 1 ms | rows/s batch 4096 | file MB |\n|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['format']} | {r['export_s']} | {r['load_s']} | {r['p50_batch1_ms']} | {r['rows_per_s_4096']:,} | "
              f"{r['bytes'] / 1e6:.0f} |")


if __name__ == "__main__":
    main()
