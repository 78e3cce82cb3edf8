"""The study in the store (a local folder or S3 over HTTP): trial 0 is the base config; a tune killed with trials
running reopens with the finished trials kept and each interrupted one queued again with its values; the journal
compacts to one file, and a compaction cut short loses and repeats nothing."""

from __future__ import annotations

import json

import optuna
import pytest
from optuna.trial import TrialState

from tuning.config import SearchSpace
from tuning.study import BASELINE, RESUMES, StoreJournal, TuneDir, counted, interrupted, is_baseline, open_study


def _study(uri: str) -> optuna.Study:
    return open_study(TuneDir(uri), seed=0, pruner=optuna.pruners.NopPruner())


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_killed_tune_reopens_with_its_finished_trials_and_queues_the_interrupted(where, tmp_path, request):
    uri = str(tmp_path / "tunes" / "t") if where == "local" else "s3://store/tunes/t"
    if where == "s3":
        request.getfixturevalue("s3_server")
    space = SearchSpace.from_yaml()
    study = _study(uri)
    first = study.ask()
    assert is_baseline(first) and first.number == 0 and first.params == {}
    study.tell(first, 0.74)
    second = study.ask()
    space.sample(second)
    second.report(0.70, 1)
    study.tell(second, 0.71)
    third = study.ask()
    values = space.sample(third)
    third.report(0.6, 1)   # ... and the process is killed here: trial 2 stays RUNNING in the journal

    again = _study(uri)
    trials = again.get_trials()
    assert [(t.number, t.state) for t in trials] == [(0, TrialState.COMPLETE), (1, TrialState.COMPLETE),
                                                    (2, TrialState.FAIL), (3, TrialState.WAITING)]
    assert trials[1].params == second.params and trials[1].value == 0.71 and trials[1].intermediate_values == {1: 0.7}
    assert interrupted(trials) == {2} and counted(trials) == 2 and trials[3].user_attrs == {RESUMES: 2}
    resumed = again.ask()   # the queued trial first, with trial 2's values
    assert resumed.number == 3 and space.sample(resumed) == values and resumed.params == trials[2].params
    assert len(StoreJournal(TuneDir(uri)).logs) == len(again._storage._backend.logs)


def test_the_base_trial_is_queued_again_when_killed(tmp_path):
    uri = str(tmp_path / "t")
    _study(uri).ask()   # trial 0 running, then killed
    trials = _study(uri).get_trials()
    assert trials[1].user_attrs == {BASELINE: True, RESUMES: 0} and is_baseline(trials[1])


def test_compaction_cut_short_loses_nothing(tmp_path):
    tune = TuneDir(str(tmp_path / "t"))
    study = _study(tune.uri)
    study.tell(study.ask(), 0.7)
    journal = StoreJournal(tune)
    files = sorted((tmp_path / "t" / TuneDir.JOURNAL).iterdir())
    assert len(files) > 3
    logs = list(journal.logs)
    # the compaction wrote the whole journal as the first file, then was killed before removing the others
    (tmp_path / "t" / TuneDir.JOURNAL / files[0].name).write_text(
        "".join(json.dumps(log) + "\n" for log in logs))
    assert StoreJournal(tune).logs == logs
    journal = StoreJournal(tune)
    journal.compact()
    assert [p.name for p in (tmp_path / "t" / TuneDir.JOURNAL).iterdir()] == [files[0].name]
    assert StoreJournal(tune).logs == logs and _study(tune.uri).get_trials()[0].value == 0.7
