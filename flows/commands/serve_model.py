"""`dlrmflow serve-model`: a serving bundle behind KServe's model server, over the Open Inference Protocol (v2)
(see training.model_server)."""

from __future__ import annotations

import argparse
import os
import sys

from common.errors import UserError

DESCRIPTION = """Serve a bundle (`dlrmflow export`) with KServe's Python model server on --port (HTTP, every
interface) until SIGINT or SIGTERM: the model `dlrm` (model.pt2, on vocabulary indices) and, where the bundle has
it, `dlrm_raw` (raw.pt2, on raw rows as the bundle's client.py encodes them), with the inputs of the bundle's model
repository (model_repository/<model>/config.pbtxt). Any v2 client (tritonclient's HTTP client, KServe's) calls
/v2/models/dlrm/infer and gets `probability`, what `dlrmflow score --bundle` gives. Needs the `serve` extra
(kserve). Not `dlrmflow serve`, which serves the pipeline's Prefect deployments.

examples:
  dlrmflow serve-model --bundle store/models/ctr/bundles/RUN --port 8080
  dlrmflow serve-model --bundle s3://bucket/bundles/r1
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bundle", required=True, help="the bundle's folder (local or s3://)")
    p.add_argument("--port", type=int, default=8080, help="the HTTP port (default 8080)")


def run(args: argparse.Namespace) -> int:
    try:
        import kserve  # noqa: F401
    except ImportError:
        raise UserError("dlrmflow serve-model needs KServe's model server, which is not installed. Fix: install "
                        "dlrmflow with its `serve` extra (pip install 'dlrmflow[serve]').") from None
    from training import serve_bundle   # heavy: torch

    serve_bundle(args.bundle, args.port)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)   # stopped, its files removed: skip the interpreter's teardown after it (seconds of CPU)
