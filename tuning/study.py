"""A tune's folder in the store (``TuneDir``: the one place that names its files) and its Optuna study, kept there
as Optuna's journal (``StoreJournal``), so a tune on a local folder or on S3 resumes after a kill: finished trials
are kept, a trial the kill interrupted is trained again with the same values (its run folder resumes from its
latest checkpoint).
"""

from __future__ import annotations

import json
import posixpath
import threading
from typing import Any, Callable, Iterable

import optuna
from optuna.storages.journal import BaseJournalBackend, JournalStorage
from optuna.trial import FrozenTrial, TrialState

from common.folder import Folder
from common.lease import lease

STUDY = "tune"             # the study's name inside its journal (one study per tune folder)
BASELINE = "baseline"      # user attribute of trial 0: the base config, trained as is
RESUMES = "resumes"        # user attribute of a trial that retrains an interrupted one: that trial's number
optuna.logging.set_verbosity(optuna.logging.WARNING)   # the flow logs each trial itself


class TuneDir(Folder):
    """One tune's folder ``<store>/tunes/<name>/``."""

    JOURNAL = "journal"         # <first log number>.jsonl: Optuna's journal, one file per append
    BEST = "best.yaml"          # the best trial's training config (a training YAML: train --config, tuned_config)
    SUMMARY = "summary.json"    # the result: best and base trial, their validation and test metrics, the savings
    TRIALS = "trials.csv"       # the trials table
    BEST_SO_FAR = "best-so-far.png"
    IMPORTANCES = "importances.png"
    LEASE = "tune.lease"        # held while a tune runs the study (one tune process per folder)
    LEASE_STALE_S = 300.0

    def write(self, data: str | bytes, *parts: str) -> None:
        """Write a file atomically."""
        (self.write_text if isinstance(data, str) else self.write_bytes)(data, *parts)

    def lease(self, say: Callable[[str], None] | None = None):
        """Hold the tune's lease for the block: a second tune of the same folder fails at once, naming the holder."""
        return lease(self.join(self.LEASE), None, "tune lease", f"tune {self.uri}", 0.0, self.LEASE_STALE_S, say=say,
                     heartbeat_s=self.LEASE_STALE_S / 5)


class StoreJournal(BaseJournalBackend):
    """Optuna's journal as files in the store: each append writes one new file named by its first log's number
    (object stores cannot append). One writer at a time: the tune's lease. Reading skips the logs a file repeats, so
    ``compact`` (one file of every log, written under the first's name) is safe to cut short at any point."""

    def __init__(self, tune: TuneDir):
        self.tune, self._lock = tune, threading.Lock()
        self.logs: list[dict[str, Any]] = []
        folder = tune.path(TuneDir.JOURNAL)
        files = sorted(p for p in (tune.fs.ls(folder, detail=False) if tune.fs.exists(folder) else [])
                       if p.endswith(".jsonl"))
        for path in sorted(files, key=lambda p: int(posixpath.basename(p).split(".")[0])):
            start = int(posixpath.basename(path).split(".")[0])
            with tune.fs.open(path, "r") as f:
                lines = [json.loads(line) for line in f.read().splitlines() if line.strip()]
            if start > len(self.logs):
                raise RuntimeError(f"{path}: the journal lacks logs {len(self.logs)}..{start - 1}")
            self.logs += lines[len(self.logs) - start:]
        self.files = len(files)

    def read_logs(self, log_number_from: int) -> Iterable[dict[str, Any]]:
        with self._lock:
            return list(self.logs[log_number_from:])

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        with self._lock:
            text = "".join(json.dumps(log) + "\n" for log in logs)
            self.tune.write(text, TuneDir.JOURNAL, f"{len(self.logs):010d}.jsonl")
            self.logs += logs
            self.files += 1

    def compact(self) -> None:
        """Rewrite the journal as one file (then remove the others): a resumed tune reads one object, not one per
        append."""
        with self._lock:
            if self.files <= 1:
                return
            folder = self.tune.path(TuneDir.JOURNAL)
            others = [p for p in self.tune.fs.ls(folder, detail=False) if p.endswith(".jsonl")
                      and posixpath.basename(p) != f"{0:010d}.jsonl"]
            self.tune.write("".join(json.dumps(log) + "\n" for log in self.logs), TuneDir.JOURNAL, f"{0:010d}.jsonl")
            for path in others:
                self.tune.fs.rm_file(path)
            self.files = 1


def open_study(tune: TuneDir, seed: int, pruner: optuna.pruners.BasePruner) -> optuna.Study:
    """The tune's study (made on first use, with trial 0, the base config, queued), its interrupted trials failed
    and queued again with the same values, so that a resumed tune trains them again (their runs resume)."""
    journal = StoreJournal(tune)
    journal.compact()
    study = optuna.create_study(study_name=STUDY, storage=JournalStorage(journal), pruner=pruner,
                                direction="maximize", load_if_exists=True)
    trials = study.get_trials(deepcopy=False)
    # seeded by the trials so far: a resumed tune does not sample its first trials' values again
    study.sampler = optuna.samplers.TPESampler(seed=seed + len(trials), multivariate=True, constant_liar=True)
    if not trials:
        study.enqueue_trial({}, user_attrs={BASELINE: True})
    for trial in trials:
        if trial.state == TrialState.RUNNING:   # the tune's lease is ours: its process is gone
            study.tell(trial.number, state=TrialState.FAIL)
            attrs = {k: v for k, v in trial.user_attrs.items() if k in (BASELINE,)}
            study.enqueue_trial(trial.params, user_attrs={**attrs, RESUMES: trial.number})
    return study


def interrupted(trials: list[FrozenTrial]) -> set[int]:
    """The numbers of the trials a kill interrupted (another trial trains their values again)."""
    return {t.user_attrs[RESUMES] for t in trials if RESUMES in t.user_attrs}


def counted(trials: list[FrozenTrial]) -> int:
    """The trials that count towards the study's: finished (complete, pruned, failed by themselves) or training;
    not one a kill interrupted (it is trained again) and not one queued."""
    again = interrupted(trials)
    return sum(t.state != TrialState.WAITING and t.number not in again for t in trials)


def is_baseline(trial: FrozenTrial | optuna.Trial) -> bool:
    return bool(trial.user_attrs.get(BASELINE))
