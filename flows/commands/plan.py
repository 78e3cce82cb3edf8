"""`dlrmflow plan`: run the sharding planner for a hardware profile and world size, without training."""

from __future__ import annotations

import argparse
import logging

HELP = "Plan embedding sharding for a hardware profile and world size (no training, no GPUs needed)."
DESCRIPTION = HELP + """

Answers "does my model fit on 8 nodes of 8 MI300X?" from a laptop: builds one table per
categorical feature (the dataset's cardinalities, or --cardinalities for a dataset not made
yet), runs TorchRec's planner on meta tensors against the profile's topology, and prints
each table's sharding and each rank's memory. Exits 2 when the tables do not fit.

examples:
  dlrmflow plan --dataset runs/datasets/criteo-ab12 --profile mi300x --world-size 64
  dlrmflow plan --cardinalities 40000000,39060,17295,7424 --profile h100 --world-size 8 --embedding-dim 128
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--dataset", metavar="URI", help="dataset folder or URI (its feature_spec.yaml gives the tables)")
    source.add_argument("--cardinalities", metavar="N,N,...", help="table sizes, for a dataset that does not exist yet")
    parser.add_argument("--profile", help="hardware profile (cpu, mi300x, mi325x, mi355x, h100, h200) or a profile "
                        "YAML (default: the config's sharding.profile, else cpu)")
    parser.add_argument("--world-size", type=int, required=True, help="total number of ranks (GPUs)")
    parser.add_argument("--local-world-size", type=int, help="ranks per node (default: the profile's)")
    parser.add_argument("--config", metavar="TRAIN.yaml", help="training config: model, optimizer, precision and "
                        "sharding sections are used")
    parser.add_argument("--embedding-dim", type=int, help="embedding width (default: the config's, else 128)")
    parser.add_argument("--batch-size", type=int, help="per-rank batch size the planner assumes "
                        "(default: the config's global data.batch_size / world size, else 4096)")
    parser.add_argument("--out", metavar="FILE", help="also write the plan text to this path or URI")


def _config(args):
    from training.config import TrainConfig

    cfg = TrainConfig.from_yaml(args.config) if args.config else TrainConfig()
    dim = args.embedding_dim or (cfg.model.embedding_dim if args.config else 128)
    model = cfg.model.model_copy(update={"embedding_dim": dim})
    sharding = cfg.sharding.model_copy(update={"profile": args.profile}) if args.profile else cfg.sharding
    batch = args.batch_size or (max(1, cfg.data.batch_size // args.world_size) if args.config else 4096)
    return cfg, model, sharding, batch


def _spec(args):
    from common.errors import UserError
    from feature_spec import Feature, FeatureSpec, load

    if args.dataset:
        return load(args.dataset)
    try:
        cards = [int(c) for c in args.cardinalities.split(",") if c.strip()]
    except ValueError:
        raise UserError(f"--cardinalities '{args.cardinalities}' is not a comma-separated list of integers.") from None
    if not cards or min(cards) < 1:
        raise UserError("--cardinalities needs at least one table size, each >= 1.")
    names = [f"cat_{i}" for i in range(len(cards))]
    return FeatureSpec(feature_spec={n: Feature(dtype="int64", cardinality=c) for n, c in zip(names, cards)},
                       channel_spec={"label": [], "categorical": names})


def run(args: argparse.Namespace) -> int:
    import fsspec

    from training.model import embedding_tables
    from training.sharding import format_plan, plan_tables
    from training.topology import build_topology, load_profile

    logging.getLogger().setLevel(logging.ERROR)  # TorchRec warns about data-parallel tables having no shard spec
    cfg, model, sharding, batch = _config(args)
    tables = embedding_tables(model, _spec(args), cfg.precision)
    profile = load_profile(sharding.profile)
    optimizer = cfg.optimizer.embedding.type
    print(f"Planning {len(tables)} tables (dim {model.embedding_dim}) for {args.world_size} x {profile.name}, "
          f"batch {batch} per rank, {optimizer} ...", flush=True)
    plan = plan_tables(tables, sharding, args.world_size, args.local_world_size, batch, optimizer=optimizer)
    text = format_plan(plan, tables, build_topology(profile, args.world_size, args.local_world_size), optimizer)
    print(text)
    if args.out:
        with fsspec.open(args.out, "w") as f:
            f.write(text + "\n")
    return 0
