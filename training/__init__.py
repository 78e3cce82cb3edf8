"""Training: the DLRM/DCNv2 network (``dlrm``), the sharding plan for a hardware topology (``sharding``,
``topology``), the train loop and its checkpoints, evaluation, scoring ranks, export, the run folder (``rundir``)
and the launchers (``launchers``: local torchrun, Slurm, Kubernetes). Plain Python, no Prefect import.

This is the package's face: code outside ``training`` imports these names from here (checked by
tests/test_layout.py). Each is imported on first use from the module that holds it (``_FACE``), so a name from a
light module (a config, the run folder) costs no torch import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.face import lazy

if TYPE_CHECKING:   # what type checkers and IDEs see; at run time each name comes from _FACE on first use
    from .checkpoint import Checkpointer, checkpoint_of
    from .config import (HOLDOUT, EvaluateConfig, FlowTrainConfig, InitFrom, PlanConfig, TrainConfig, checkpoint_name,
                         config_hash, default_train, hashed_run, preset_names)
    from .data import spec_pooling_factors
    from .dlrm import embedding_tables, table_name
    from .evaluate import check_inputs, completed, evaluate_run
    from .evaluate_slices import check_feature, raw_values, read_column, slices_png
    from .export import export_bundle, export_verified, load_bundle, predict_split
    from .launchers import LauncherConfig, LocalLauncherConfig, RankOutput, RanksConfig, build_launcher, train_job
    from .launchers.output import NOISE, library_note
    from .model_server import serve_bundle
    from .report import TABLE, format_table
    from .rundir import RunDir
    from .score import LABEL, PROBABILITY, predict_parts, scoring_launcher, write_scores
    from .sharding import format_plan, plan_tables
    from .topology import build_topology, resolve_profile
    from . import metrics, plots

_FACE = {   # name -> the module of this package that holds it (a module's own name: the module)
    "EvaluateConfig": "config", "FlowTrainConfig": "config", "HOLDOUT": "config", "InitFrom": "config",
    "PlanConfig": "config", "TrainConfig": "config", "checkpoint_name": "config", "config_hash": "config",
    "default_train": "config", "hashed_run": "config", "preset_names": "config",
    "RunDir": "rundir",
    "Checkpointer": "checkpoint", "checkpoint_of": "checkpoint",
    "check_inputs": "evaluate", "completed": "evaluate", "evaluate_run": "evaluate",
    "check_feature": "evaluate_slices", "raw_values": "evaluate_slices", "read_column": "evaluate_slices",
    "slices_png": "evaluate_slices",
    "export_bundle": "export", "export_verified": "export", "load_bundle": "export", "predict_split": "export",
    "LABEL": "score", "PROBABILITY": "score", "predict_parts": "score", "scoring_launcher": "score",
    "write_scores": "score",
    "TABLE": "report", "format_table": "report",
    "format_plan": "sharding", "plan_tables": "sharding",
    "build_topology": "topology", "resolve_profile": "topology",
    "spec_pooling_factors": "data",
    "embedding_tables": "dlrm", "table_name": "dlrm",
    "LauncherConfig": "launchers", "LocalLauncherConfig": "launchers", "RankOutput": "launchers",
    "RanksConfig": "launchers", "build_launcher": "launchers", "train_job": "launchers",
    "NOISE": "launchers.output", "library_note": "launchers.output",
    "serve_bundle": "model_server",
    "metrics": "metrics", "plots": "plots",
}
__all__, __getattr__, __dir__ = lazy(__name__, _FACE)
