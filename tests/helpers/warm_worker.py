"""Test helper, run by torchrun on N ranks: ``warm_worker.py CONFIG_JSON OUT``. Builds the Trainer of a
TrainConfig (with ``init_from``), warm-starts it (0 training steps), saves it as checkpoint 0 of the run
folder OUT (model and optimizer state, DCP) and writes the sorted probabilities of the test split to
OUT/pred.npy (rank 0)."""

import sys
from pathlib import Path

import numpy as np

from training import distributed
from training.checkpoint import Checkpointer
from training.config import TrainConfig
from training.rundir import RunDir
from training.trainer import Trainer
from training.warmstart import warm_start


def main(config: str, out: str) -> None:
    cfg = TrainConfig.model_validate_json(config)
    trainer = Trainer(cfg, distributed.init(cfg.pg_timeout_s))
    warm_start(trainer, cfg.init_from)
    Checkpointer(RunDir(out)).save(0, trainer.state_dict())
    p, _ = trainer.predict("test")
    if trainer.env.is_main:
        np.save(Path(out) / "pred.npy", np.sort(p))


if __name__ == "__main__":
    distributed.exit_rank(distributed.run_rank(lambda: main(sys.argv[1], sys.argv[2])))
