"""Inflate speed of one `.gz` file: zlib vs ISA-L (`isal`) vs zlib-ng (`zlib-ng`), in one run.

Each inflater decompresses the whole file into 32 MB reads, the way the preprocessing reads a `.gz` input
(``preprocessing.readers``): the streaming ``decompressobj(31)`` loop of ``readers._Gunzip`` over each
module (zlib, ``isal.isal_zlib``, ``zlib_ng.zlib_ng``) and each package's own file object
(``gzip.GzipFile``, ``isal.igzip``, ``zlib_ng.gzip_ng``). The rounds are interleaved (the machine is
shared); per inflater: the best wall s of the rounds after the first, its CPU s (this process), output MB/s
and the ratio to zlib's streaming loop. The first round hashes every output (SHA-256), which must equal zlib's.

    python benchmarks/bench_gzip.py FILE.gz [--rounds 3]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib
import os
import resource
import time


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _stream(module):
    """readers._Gunzip's loop with ``module.decompressobj``: (bytes out, sha256)."""
    def run(path: str, check: bool, size: int = 32 << 20) -> tuple[int, str]:
        h, total = hashlib.sha256() if check else None, 0
        with open(path, "rb") as f:
            d, tail = module.decompressobj(31), b""
            while True:
                if d.eof:
                    tail, d = d.unused_data, module.decompressobj(31)
                if not tail:
                    tail = f.read(1 << 22)
                    if not tail:
                        break
                piece = d.decompress(tail, size)
                tail = d.unconsumed_tail
                if h:
                    h.update(piece)
                total += len(piece)
        return total, h.hexdigest() if h else ""
    return run


def _fileobj(opener):
    def run(path: str, check: bool, size: int = 32 << 20) -> tuple[int, str]:
        h, total = hashlib.sha256() if check else None, 0
        with opener(path, "rb") as f:
            while piece := f.read(size):
                if h:
                    h.update(piece)
                total += len(piece)
        return total, h.hexdigest() if h else ""
    return run


def inflaters() -> dict:
    found = {"zlib": _stream(importlib.import_module("zlib")), "gzip.GzipFile": _fileobj(gzip.open)}
    for name, module, opener in (("isal", "isal.isal_zlib", "isal.igzip"),
                                 ("zlib-ng", "zlib_ng.zlib_ng", "zlib_ng.gzip_ng")):
        try:
            found[f"{name} (decompressobj)"] = _stream(importlib.import_module(module))
            found[f"{name} ({opener.split('.')[-1]}.open)"] = _fileobj(importlib.import_module(opener).open)
        except ImportError:
            print(f"{name}: not installed, skipped")
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    runs = inflaters()
    best: dict[str, tuple[float, float]] = {}
    digest = {}
    out_bytes = 0
    for k in range(max(args.rounds, 2)):
        for name, run in runs.items():
            w, c = time.perf_counter(), _cpu()
            out_bytes, h = run(args.file, k == 0)
            w, c = time.perf_counter() - w, _cpu() - c
            if k == 0:
                digest[name] = h
            elif name not in best or w < best[name][0]:
                best[name] = (w, c)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    assert len(set(digest.values())) == 1, f"outputs differ: {digest}"
    mb = out_bytes / 1e6
    print(f"\n{args.file}: {os.path.getsize(args.file) / 1e6:.0f} MB compressed, {mb:.0f} MB out; "
          f"best of {max(args.rounds, 2) - 1} rounds; every output identical (sha256 {next(iter(digest.values()))[:12]})\n")
    print("| inflater | wall s | CPU s | MB/s out | vs zlib |\n|---|---|---|---|---|")
    ref = best["zlib"][0]
    for name, (w, c) in best.items():
        print(f"| {name} | {w:.2f} | {c:.2f} | {mb / w:.0f} | {ref / w:.2f}x |")


if __name__ == "__main__":
    main()
