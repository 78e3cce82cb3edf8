"""``python -m flows.launchers render``: print the sbatch script or Kubernetes manifest a launcher would submit.

examples:
  python -m flows.launchers render --kind slurm --run s3://bucket/runs/r1 --nodes 4 --set partition=mi300x
  python -m flows.launchers render --kind kubernetes --run s3://bucket/runs/r1 --nodes 2 --set image=REGISTRY/dlrmflow-rocm:0.1.0
  python -m flows.launchers render --config launcher.yaml --run s3://bucket/runs/r1 > job.yaml
"""

from __future__ import annotations

import argparse
import sys

import yaml

from common.errors import UserError


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m flows.launchers", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("render", help="print what the launcher would submit (nothing is submitted)")
    r.add_argument("--config", help="LauncherConfig YAML (kind, env, slurm/kubernetes settings)")
    r.add_argument("--kind", choices=["slurm", "kubernetes"], help="launcher kind (overrides the config's)")
    r.add_argument("--run", required=True, help="run folder URI the ranks read config.yaml from")
    r.add_argument("--nodes", type=int, help="number of nodes")
    r.add_argument("--resume", action="store_true", help="render the --resume variant")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting of the chosen kind, e.g. --set partition=gpu (repeatable)")
    args = p.parse_args(argv)

    from flows.launchers import LauncherConfig, build_launcher

    try:
        data = yaml.safe_load(open(args.config)) if args.config else {}
        data = data or {}
        kind = args.kind or data.get("kind") or "slurm"
        data["kind"] = kind
        section = data.setdefault(kind, {})
        if args.nodes:
            section["nodes"] = args.nodes
        for item in args.set:
            key, sep, value = item.partition("=")
            if not sep:
                raise UserError(f"--set {item!r}: expected KEY=VALUE")
            section[key.strip()] = yaml.safe_load(value)
        launcher = build_launcher(LauncherConfig.model_validate(data))
        sys.stdout.write(launcher.render(args.run, resume=args.resume))
        return 0
    except (UserError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
