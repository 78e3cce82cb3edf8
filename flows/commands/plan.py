"""`dlrmflow plan`: run the sharding planner for a hardware profile and world size, without training."""

from __future__ import annotations

import argparse
import logging

from common.atomic import write_uri
from common.errors import UserError
from feature_spec import Feature, FeatureSpec, load
from flows.options import add_options, build
from training import PlanConfig, TrainConfig

DESCRIPTION = """\
Answers "does my model fit on 8 nodes of 8 MI300X?" from a laptop: builds one table per
categorical feature (the dataset's cardinalities, or --cardinalities for a dataset not made
yet), runs TorchRec's planner on meta tensors against the profile's topology, and prints
each table's sharding and each rank's memory. Exits 2 when the tables do not fit.

The tables' settings come from --config TRAIN.yaml (arch, optimizer, precision and sharding
sections) or the flags below (default: the 'default' preset's).

examples:
  dlrmflow plan --dataset runs/datasets/criteo-ab12 --sharding.profile mi300x --world-size 64
  dlrmflow plan --cardinalities 40000000 39060 17295 7424 --sharding.profile h100 --world-size 8 --arch.embedding-dim 128 --arch.bottom-mlp 512 256 128
"""

EVERYDAY = ("--dataset", "--cardinalities", "--world-size", "--local-world-size", "--batch-size", "--out", "--config",
            "--sharding.profile", "--arch.embedding-dim", "--precision.embeddings")

_TABLE_SECTIONS = ("arch", "optimizer", "precision", "sharding")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(parser, PlanConfig, root="plan")
    parser.add_argument("--config", metavar="TRAIN.yaml", help="a training config YAML file of yours: its arch, "
                        "optimizer, precision and sharding sections are used")
    add_options(parser, TrainConfig, root="train", defaults=TrainConfig.preset("default"),
                skip={f for f in TrainConfig.model_fields if f not in _TABLE_SECTIONS})


def _config(args):
    request = build(PlanConfig, args, root="plan")
    if bool(request.dataset) == bool(request.cardinalities):
        raise UserError("plan needs either --dataset URI or --cardinalities N [N ...]. Fix: pass one of them.")
    base = TrainConfig.from_yaml(args.config) if args.config else TrainConfig.preset("default")
    cfg = build(TrainConfig, args, base.model_dump(mode="json"), root="train")
    batch = request.batch_size or max(1, cfg.data.batch_size // request.world_size)
    return request, cfg, batch


def _spec(request):
    if request.dataset:
        return load(request.dataset)
    cards = request.cardinalities
    if min(cards) < 1:
        raise UserError("--cardinalities: every table size must be >= 1.")
    names = [f"cat_{i}" for i in range(len(cards))]
    return FeatureSpec(feature_spec={n: Feature(dtype="int64", cardinality=c) for n, c in zip(names, cards)},
                       channel_spec={"label": [], "categorical": names})


def run(args: argparse.Namespace) -> int:
    # heavy: TorchRec's sharding planner imports torch (the command's --help does not)
    from training import build_topology, embedding_tables, format_plan, plan_tables, resolve_profile
    from training import spec_pooling_factors, table_name

    logging.getLogger().setLevel(logging.ERROR)  # TorchRec warns about data-parallel tables having no shard spec
    request, cfg, batch = _config(args)
    spec = _spec(request)
    tables = embedding_tables(cfg.arch, spec, cfg.precision)
    factors = {table_name(f): v for f, v in spec_pooling_factors(spec, cfg.data.train_split).items()}
    profile, why = resolve_profile(cfg.sharding.profile)  # no device here: 'auto' is refused, in one line
    optimizer = cfg.optimizer.embedding.type
    world, local = request.world_size, request.local_world_size
    print(f"Planning {len(tables)} tables (dim {cfg.arch.embedding_dim}) for {world} x {profile.name}, "
          f"batch {batch:,} per rank, {optimizer} ...", flush=True)
    plan = plan_tables(tables, cfg.sharding, world, local, batch, optimizer=optimizer, profile=profile,
                       pooling_factors=factors)
    text = format_plan(plan, tables, build_topology(profile, world, local), optimizer, factors, why)
    print(text)
    if request.out:
        write_uri(request.out, text + "\n")
    return 0
