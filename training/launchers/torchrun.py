"""torchrun whose ranks start with their imports done: ``python -m training.launchers.torchrun ARGS``
takes torchrun's own arguments and runs torch's torchrun (``torch.distributed.run``: the same rendezvous,
restarts, ``--tee`` prefixes and failure summary). On a CPU-only torch build it first imports what every rank
job imports (``PRELOAD``: torch, TorchRec, the trainer: ~4 CPU-seconds), then forks the ranks from this process
and runs the rank module's file (``-m MODULE``, or a script) as ``__main__`` in each, instead of starting a
fresh interpreter per rank that imports it all again. A build with GPU support starts the ranks as torchrun
does (a new interpreter each): a forked rank could not use a CUDA/HIP context, so nothing may touch the GPU
before the ranks do. ``--start-method spawn`` (the local launcher's ``start_method``) starts them so on a CPU
build too: the GPU's process model, on a laptop.

Before torch is imported, the ``--rdzv-endpoint`` host must resolve (``check_rendezvous_host``): torch would
wait for it until its rendezvous timed out. A job of several nodes tags each rank's lines with its node and
global rank (``[n2 rank1]:``, ``node_prefix``) instead of torchrun's ``[default0]:``, which is the same on every
node."""

from __future__ import annotations

import os
import socket
import sys
import time

PRELOAD = ("training.trainer",)
FORKED = "DLRMFLOW_FORKED_RANK"   # set in a forked rank's environment: how it ends (``training.distributed.exit``)
# how long the rendezvous host may take to resolve: set by the Kubernetes launcher (pod 0's DNS record appears
# once it has an address); 0 elsewhere: a Slurm node's name resolves from the start or never
RESOLVE_WAIT = "DLRMFLOW_RDZV_RESOLVE_WAIT_S"
PREFIX_TEMPLATE = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"   # read by torch's elastic agent
# torchrun's options that take no value (every other option takes one)
_FLAGS = {"--standalone", "-m", "--module", "--no-python", "--no_python", "--run-path", "--run_path",
          "--virtual-local-rank", "--virtual_local_rank"}


def node_name() -> str:
    """This node's name: Slurm's for its node (all nodes of one machine share a host name), else the host name
    (a Kubernetes pod's is ``<job>-<index>``)."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def torchrun_options(argv: list[str]) -> dict[str, str]:
    """torchrun's options in ``argv`` up to the rank module or script (``--name=value`` and ``--name value``;
    a flag maps to ""), with ``PET_<NAME>`` environment variables for those not given, as torchrun reads them."""
    found: dict[str, str] = {}
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        name, eq, value = argv[i].partition("=")
        key = name.lstrip("-").replace("_", "-")
        if eq or name in _FLAGS:
            found[key] = value
            i += 1
        else:
            found[key] = argv[i + 1] if i + 1 < len(argv) else ""
            i += 2
    for key in ("rdzv-endpoint", "nnodes", "standalone"):
        env = os.environ.get("PET_" + key.upper().replace("-", "_"))
        if key not in found and env is not None:
            found[key] = env
    return found


def endpoint_host(endpoint: str) -> str:
    """The host of ``HOST[:PORT]`` (``[v6]:PORT`` too)."""
    if endpoint.startswith("["):
        return endpoint[1:endpoint.find("]")]
    return endpoint.rsplit(":", 1)[0] if endpoint.count(":") == 1 else endpoint


def check_rendezvous_host(endpoint: str, wait_s: float = 0.0) -> None:
    """Exit with one line naming the host when ``endpoint``'s host does not resolve here within ``wait_s``."""
    host = endpoint_host(endpoint)
    deadline, said = time.monotonic() + wait_s, False
    while True:
        try:
            socket.getaddrinfo(host, None)
            return
        except (socket.gaierror, UnicodeError):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if not said:
                print(f"dlrmflow: waiting up to {wait_s:g} s for the rendezvous host '{host}' to resolve", flush=True)
                said = True
            time.sleep(min(2.0, left))
    print(f"dlrmflow: rendezvous host '{host}' (from --rdzv-endpoint {endpoint}) does not resolve on {node_name()}"
          f"{f' (waited {wait_s:g} s)' if wait_s else ''}. Fix: make every node's name resolve on every node (DNS or "
          "/etc/hosts; on Slurm the NodeName of slurm.conf, on Kubernetes the job's headless Service), or give the "
          "rendezvous an address that does.", file=sys.stderr, flush=True)
    sys.exit(1)


def node_prefix(options: dict[str, str]) -> str | None:
    """``[<node> rank${rank}]:`` for a job of several nodes (its ranks' ``[defaultN]:`` repeat on every node),
    None for one node (local and global ranks are the same there)."""
    nnodes = options.get("nnodes", "1").split(":")[-1]
    if "standalone" in options or not nnodes.isdigit() or int(nnodes) < 2:
        return None
    return f"[{node_name().replace('$', '$$')} rank${{rank}}]:"


def forks_ranks(options: dict[str, str] | None = None) -> bool:
    """Whether ranks are forked from the launcher: only on a torch build without CUDA or ROCm support, and unless
    torchrun's ``options`` (``torchrun_options``) say ``--start-method spawn`` (or ``forkserver``)."""
    if (options or {}).get("start-method", "fork") != "fork":
        return False
    import torch

    return torch.version.cuda is None and torch.version.hip is None


def _fork_from_here(args) -> None:
    """Import ``PRELOAD`` here, and make torchrun fork the ranks and run the rank module's file as ``__main__``
    in each (``--run-path``; an exit code of 0 there is a normal return)."""
    import gc
    import importlib
    import importlib.util

    from torch.distributed.elastic.multiprocessing.api import MultiprocessContext

    for name in PRELOAD:
        importlib.import_module(name)
    gc.collect()
    gc.freeze()   # the ranks' garbage collections skip the imported heap (~0.2 CPU-s a full one; no pages copied)
    if args.module:
        args.training_script = importlib.util.find_spec(args.training_script).origin
    args.module, args.run_path, args.start_method = False, True, "fork"
    os.environ[FORKED] = "1"
    MultiprocessContext._poll = _report_every_failed_rank(MultiprocessContext._poll)
    sys.stdout.flush()
    sys.stderr.flush()


def _report_every_failed_rank(poll):
    """torch's poll of forked ranks reports one failed rank, the first it looks at; torchrun's subprocess ranks
    report every rank that had failed by then. Report them all, a rank killed by a signal first (on a tie of
    timestamps it is the root cause: a rank that dies takes its peers' collectives down with it, not the other
    way round), so the failure summary names the rank that died, as with torchrun."""
    from torch.distributed.elastic.multiprocessing.api import RunProcsResult
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    def report(self) -> RunProcsResult | None:
        failed = {i: p.exitcode for i, p in enumerate(self._pc.processes if self._pc else []) if p.exitcode}
        result = poll(self)
        if result is None or not result.failures:
            return result
        for i, code in failed.items():
            if i not in result.failures:
                result.failures[i] = ProcessFailure(local_rank=i, pid=self._pc.processes[i].pid, exitcode=code,
                                                    error_file=self.error_files[i])
        result.failures = dict(sorted(result.failures.items(), key=lambda kv: (kv[1].exitcode >= 0, kv[0])))
        return result
    return report


def _run(argv: list[str]) -> None:
    from torch.distributed import run as torchrun

    args = torchrun.parse_args(argv)
    if forks_ranks(torchrun_options(argv)) and not args.no_python:
        _fork_from_here(args)
    torchrun.run(args)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    options = torchrun_options(argv)
    if options.get("rdzv-endpoint") and "standalone" not in options:   # before the seconds of torch's imports
        check_rendezvous_host(options["rdzv-endpoint"], float(os.environ.get(RESOLVE_WAIT) or 0))
    if (prefix := node_prefix(options)) and PREFIX_TEMPLATE not in os.environ:
        os.environ[PREFIX_TEMPLATE] = prefix
    from torch.distributed.elastic.multiprocessing.errors import record

    record(_run)(argv)


def main_then_exit() -> None:
    """``main()``, then the process ends without the interpreter's teardown: with torch and TorchRec loaded, the
    collection of their heap at exit took 1.5-3 s (~1 CPU-s) after the job had ended, on every node (the ranks end
    so already: ``training.distributed.exit_rank``). The exit code and output are the interpreter's: a traceback on
    an exception and exit 1."""
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else (print(e.code, file=sys.stderr) or 1)
    except KeyboardInterrupt:
        raise   # the interpreter's own end (by SIGINT)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main_then_exit()
