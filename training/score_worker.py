"""Per-rank entry point of batch scoring that torchrun starts:
``python -m training.score_worker RUN --step STEP --dataset DATASET --split SPLIT --parts FOLDER``
(``training.score.predict_parts`` launches it).

Every rank loads the checkpoint (DCP reshards it to this world size) and writes the probabilities of its
rows of the split, in row order, to ``FOLDER/probs-<rank>.bin`` (float32); rank 0 writes ``FOLDER/meta.json``
(how the rows were dealt to the ranks, for ``training.score.probabilities``). ``FOLDER`` is a local folder, or
a URI (a scratch folder in the run folder, when the ranks run on other machines). The launcher reads them once
torchrun has exited with 0 (every rank done).
"""

from __future__ import annotations

import argparse
import json
import posixpath

from common.atomic import write_atomic
from common.store import filesystem
from training import calibration, distributed
from training.rundir import RunDir
from training.score import META, part_name
from training.trainer import Trainer


def score(run: RunDir, step: int, dataset: str, split: str, parts: str) -> None:
    """Predict this rank's rows of ``split`` of ``dataset`` with checkpoint ``step`` of ``run``."""
    from tqdm import tqdm

    trainer = Trainer.from_run(run, step, overrides={"dataset": dataset, "data.train_split": split})
    env, data = trainer.env, trainer.dataset(split)
    batches = data.num_batches(trainer.eval_batch_size, env.world_size)
    fs, folder = filesystem(parts)
    fs.makedirs(folder, exist_ok=True)
    with fs.open(posixpath.join(folder, part_name(env.rank)), "wb") as f:
        for p, y in tqdm(trainer.predict_stream(split), total=batches, desc="score", unit=" batch",
                         disable=not env.is_main, dynamic_ncols=True):
            f.write(p[y >= 0].float().cpu().numpy().tobytes())
    if env.is_main:
        write_atomic(posixpath.join(folder, META), json.dumps({"rows": data.num_rows, "world_size": env.world_size,
                                                              "batch_rows": trainer.eval_batch_size * env.world_size}),
                     fs)
        print(f"scored {data.num_rows:,} rows with step {step} on {env.world_size} rank(s); "
              f"{calibration.describe(trainer.calibration)}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.score_worker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="run folder or URI (holds config.yaml and checkpoints/)")
    parser.add_argument("--step", type=int, required=True, help="the checkpoint step")
    parser.add_argument("--dataset", required=True, help="the encoded dataset to score")
    parser.add_argument("--split", required=True, help="its split to score")
    parser.add_argument("--parts", required=True, help="folder (or URI) for the per-rank probability parts")
    args = parser.parse_args(argv)
    return distributed.run_rank(
        lambda: score(RunDir(args.run), args.step, args.dataset, args.split, args.parts), args.run)


if __name__ == "__main__":
    distributed.exit_rank(main())   # the process group is destroyed and every file written by now
