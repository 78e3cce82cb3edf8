"""The search space: the default one samples only valid training configs (the MLPs end right, the DCN-v2 fields only
with the dcn interaction), a bad space file fails before any trial naming the field and the fix, and every sampled
trial validates at the same points of its epochs whatever its batch size."""

from __future__ import annotations

import optuna
import pytest

from common.errors import UserError
from training.config import TrainConfig
from tuning.config import SearchSpace, TuneConfig


def test_default_space_samples_valid_configs():
    space, base, tune = SearchSpace.from_yaml(), TrainConfig.preset("criteo-sample"), TuneConfig(dataset="d")
    space.check(base, ranks=2)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3), direction="maximize")
    seen = set()
    for _ in range(40):
        trial = study.ask()
        values = space.sample(trial)
        cfg = tune.trial_config(base, space, values, train_rows=7000)
        arch = cfg.arch
        assert arch.bottom_mlp == values["arch.bottom_mlp"] + [values["arch.embedding_dim"]]
        assert arch.top_mlp == values["arch.top_mlp"] + [1]
        assert ("arch.dcn_rank" in values) == (arch.interaction == "dcn") == ("arch.dcn_layers" in trial.params)
        assert cfg.optimizer.dense.lr == values["optimizer.dense.lr"] and 0.003 <= cfg.optimizer.dense.lr <= 0.3
        # four validations an epoch, whatever the batch size; the base's early stopping and best checkpoint rule
        assert cfg.eval_every == max(1, 7000 // cfg.data.batch_size // 4)
        assert (cfg.best_metric, cfg.early_stopping_patience, cfg.keep_checkpoints) == ("logloss", 6, 1)
        study.tell(trial, 0.5)
        seen.add((arch.interaction, cfg.data.batch_size))
    assert len(seen) >= 6   # the space is searched, not one corner of it


def test_the_base_mlp_follows_a_sampled_embedding_dim(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text("arch.embedding_dim: {choices: [8, 32]}\n")
    space = SearchSpace.from_yaml(str(path))
    cfg = space.config(TrainConfig.preset("default"), {"arch.embedding_dim": 32})
    assert cfg.arch.bottom_mlp == [64, 32]   # the default preset's [64, 16], ending with the sampled width


@pytest.mark.parametrize("text, expected", [
    ("optimizer.dense.rate: {low: 0.01, high: 0.1}\n", "'optimizer.dense.rate' is not a training config field"),
    ("arch.top_mlp: {low: 1, high: 4}\n", "arch.top_mlp is not a number, so it takes choices"),
    ("arch.bottom_mlp: {choices: [64, 128]}\n", "each choice lists the hidden layers"),
    ("arch.dcn_rank: {choices: [8], when: {arch.interaction: dcn}}\n", "'when' names arch.interaction"),
    ("optimizer.dense.lr: {low: 0, high: 0.1, log: true}\n", "a log range needs low > 0"),
    ("optimizer.dense.lr: {low: 0.2, high: 0.1}\n", "a range needs low < high"),
    ("data.batch_size: {choices: [128, 99]}\n", "data.batch_size 99 does not divide over the 2 ranks"),
    ("arch.interaction: {choices: [dot, cross]}\n", "arch.interaction: Input should be 'dot' or 'dcn'"),
    ("- just a list\n", "a search space is a mapping"),
    ("data.batch_size: {choices: [1024, 4096]}\n", "data.batch_size 4096 is more than the 3000 rows"),
])
def test_a_bad_space_fails_before_any_trial(tmp_path, text, expected):
    path = tmp_path / "space.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as e:
        SearchSpace.from_yaml(str(path)).check(TrainConfig.preset("default"), ranks=2, train_rows=3000)
    assert expected in str(e.value) and str(path) in str(e.value)


def test_trials_of_any_batch_size_report_at_the_same_points():
    """A sampled trial's k-th validation is its point k (four an epoch); trial 0, on its own cadence, reports at the
    nearest quarter epoch it has seen."""
    tune, rows = TuneConfig(dataset="d"), 10_000
    assert [tune.report_point(k, 2 * k, 1024, rows, sampled=True) for k in (1, 2, 3, 4)] == [1, 2, 3, 4]
    assert [tune.report_point(k, 10 * k, 128, rows, sampled=False) for k in (1, 2, 4, 8)] == [1, 1, 2, 4]


def test_a_tunes_name_is_the_same_wherever_its_store_is(tmp_path):
    """A tune on a dataset of its store is named by the dataset's store-relative location: the store restored at
    another path resumes the same tune (and its trials' runs: training.hashed_run); a tune made before, named by the
    dataset's absolute URI, keeps its name in a store that has not moved; a dataset elsewhere names it by its URI."""
    from common.store import Store

    space = SearchSpace.from_yaml()

    def name(root: str, dataset: str | None = None) -> tuple[str, str]:
        store = Store(root)
        dataset = dataset or store.dataset_uri("criteo-ab12")
        tune = TuneConfig(dataset=dataset, store=root)
        base = tune.base().model_copy(update={"dataset": dataset})
        return tune.study_name(dataset, base, space, store), tune.study_name(dataset, base, space)

    old, legacy = name(str(tmp_path / "store"))
    assert old.startswith("criteo-ab12-tune-") and legacy != old
    assert name(str(tmp_path / "restored" / "store"))[0] == old
    (tmp_path / "store" / "tunes" / legacy).mkdir(parents=True)   # made before the upgrade: resumed
    assert name(str(tmp_path / "store")) == (legacy, legacy)
    outside = str(tmp_path / "elsewhere" / "criteo-ab12")
    assert name(str(tmp_path / "store"), outside)[0] == name(str(tmp_path / "store"), outside)[1] != old
    assert TuneConfig(dataset="d", name="mine").study_name("d", TrainConfig(), space, Store(str(tmp_path))) == "mine"
