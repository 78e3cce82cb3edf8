"""A pipeline run's decisions without Prefect, the night's one owner: ``skip_reason`` the catch-up verdict on a
scheduled night, ``set_up`` what a run (a dated night, or a plain run) does before any work (the preset or tuned
config applied, the window, the preprocessing), ``Setup.training`` what it trains once its dataset is known (the
run, the warm start from the champion, the resolved pipeline.yaml), ``check_days`` the data gate's verdict on the
window's days (``parse_failed`` on a day whose own file failed its parse) and ``compete`` the challenger against the
champion (scored, decided and recorded by ``models.registry``). The flows (``flows.pipeline`` and its tasks) call
these, one call per task, and add what only Prefect has: the due scheduled runs, logs, artifacts and events."""

from __future__ import annotations

import datetime as dt
import math
import os
import posixpath
import tempfile
from dataclasses import dataclass, field
from typing import Callable

from common.errors import UserError
from common.store import Store
from models import RowScores, ScoreConfig, paired, registry, scoring, slices, watch
from nightly import datacheck
from training import FlowTrainConfig, InitFrom, RunDir, TrainConfig
from nightly.config import PipelineConfig
from nightly.window import Window, absolute, catchup_skip, lookback, window
from preprocessing.dated import fill_date
from preprocessing.errors import blamed
from preprocessing.inputs import expand
from preprocessing.config import FlowPreprocessConfig
from preprocessing.profile import StoredProfiles

Say = Callable[[str], None]
METRICS = ("auc", "logloss", "rows", "positives", "base_logloss", "calibration")   # what the gates read of each model


def _quiet(_: str) -> None:
    pass


@dataclass(frozen=True)
class RunSettings:
    """What a pipeline run trains, once its dataset is known."""

    run: RunDir
    train: FlowTrainConfig            # on the dataset, resolved, warm-started from the champion where it may be
    validation: str                   # what it validates on, in words
    resolved: dict                    # the run's pipeline.yaml: every setting as it ran, the dataset and the date

    def write(self) -> None:
        """Write the run's pipeline.yaml (before training: a re-run compares its settings)."""
        import yaml

        self.run.write_text(yaml.safe_dump(self.resolved, sort_keys=False), RunDir.PIPELINE)


@dataclass(frozen=True)
class Setup:
    """What a pipeline run does, decided before any work: ``config`` with its preset or tuned config applied
    (``notes`` say what was), its ``store``, for a dated run its ``day`` and ``window``, and its preprocessing."""

    config: PipelineConfig
    store: Store
    preprocess: FlowPreprocessConfig
    day: dt.date | None = None
    window: Window | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def model(self) -> str | None:
        """The URI of the model this night competes for (None: no model, or not dated)."""
        return registry.model_uri(self.store.uri, self.config.model) if self.config.model and self.window else None

    def synthetic_inputs(self) -> bool:
        """Whether the run reads the synthetic logs (no inputs given), which ``flows.pipeline.synthesize`` writes."""
        return not self.config.preprocess.inputs

    def training(self, dataset: str, say: Say = _quiet) -> RunSettings:
        """The run of this setup on ``dataset``: its folder (named by the training settings before the warm start, so
        a re-run of the night finds it), its training settings and its pipeline.yaml."""
        config = self.config
        trained = config.train.on(dataset).resolved()   # validation made explicit: the run's name says it too
        config.check_held_out(trained.eval_split)
        run = RunDir(self.store.run_uri(config.run_id(self.store, dataset, trained, self.day)))
        settings = self.warm_started(say) if self.window else config.train
        settings = FlowTrainConfig.model_validate(settings.on(dataset).resolved().model_dump())
        preprocessing = config.preprocess.model_copy(update={"inputs": self.preprocess.inputs})
        resolved = config.model_copy(update={"store": self.store.uri, "train": settings, "preprocess": preprocessing})
        resolved = resolved.model_dump(mode="json")
        # the dataset the flow filled in is no dumped field: it follows the training settings
        resolved |= {"train": resolved["train"] | {"dataset": dataset},
                     "date": self.day.isoformat() if self.day else None}
        return RunSettings(run, settings, trained.validation_text(), resolved)

    def warm_started(self, say: Say = _quiet) -> TrainConfig:
        """With a model and ``promote.warm_start``: the training settings initialised from the champion (of an
        earlier day, of the same architecture: ``warm_source``)."""
        champion = warm_source(self.config, self.model, self.day, say) if self.model else None
        if champion is None:
            return self.config.train
        say(f"warm start from the champion of model {self.config.model}: {champion.run} step {champion.step} (tested "
            f"on {champion.date})")
        return self.config.train.model_copy(update={"init_from": InitFrom(run=champion.run,
                                                                          checkpoint=str(champion.step))})


def warm_source(config: PipelineConfig, model: str, day: dt.date, say: Say = _quiet) -> registry.Champion | None:
    """The champion a night of ``model`` on ``day`` warm-starts from: with ``promote.warm_start`` and no
    ``train.init_from``, the usable champion of an earlier day whose architecture is the night's (None, said why,
    where there is none)."""
    if not config.promote.warm_start or config.train.init_from:
        return None
    champion, absent = registry.usable_champion(model, day.isoformat())
    if absent:
        say(f"no warm start from model {config.model}: {absent}; training from scratch")
    if champion is None or champion.date == day.isoformat():   # the night's own model: a re-run as the first
        return None
    arch = RunDir(champion.run).load_config().arch
    if arch != config.train.arch:   # e.g. a tuned config changed it: its weights do not fit this night's model
        say(f"no warm start: the champion of model {config.model} ({champion.run}) has another architecture than "
            f"this night's ({arch.model_dump(exclude_defaults=True)} vs "
            f"{config.train.arch.model_dump(exclude_defaults=True)}; a tuned config may have changed it); "
            "training from scratch")
        return None
    return champion


def _learned(config: PipelineConfig, model: str, day: dt.date) -> dt.date | None:
    """The last day the champion a night warm-starts from trained on (``promote.warm_start_days: new``: the night
    trains only on its days after it); None: the night trains on its whole window. A night already decided (a re-run)
    reads the days it read then: the last training day its champion had is taken from its history line."""
    if config.promote.warm_start_days != "new":
        return None
    val = config.window.val_days
    decided = next((line for line in reversed(registry.history(model)) if line.get("date") == day.isoformat()
                    and line.get("decision") in (*registry.PROMOTING, "kept")), None)
    if decided is not None:   # the days it read then: its first training day follows what its champion learned
        read = [dt.date.fromisoformat(d) for d in decided.get("window") or []][:-1 - val]
        return read[0] - dt.timedelta(days=1) if read else None
    champion = warm_source(config, model, day)
    trained = [dt.date.fromisoformat(d) for d in champion.window][:-1 - val] if champion else []
    return max(trained) if trained else None


def skip_reason(config: PipelineConfig, store: Store, day: dt.date, due: list[dt.date], owner: str | None = None,
                say: Say = _quiet) -> str | None:
    """Why the scheduled night ``day`` is skipped under ``night.catchup`` (None: it runs), given the days of the
    deployment's other due scheduled runs; a skip is recorded in the model's history (decided before the night
    is set up: a stale night is skipped even when its days are missing)."""
    if config.night.catchup == "all":
        return None
    model = registry.model_uri(store.uri, config.model) if config.model else None
    decided = [dt.date.fromisoformat(d) for d in registry.decided_dates(model)] if model else []
    reason = catchup_skip(day, config.night.catchup, due, decided)
    if reason:
        say(f"night {day} skipped ({reason})")
        if model:
            registry.record_skipped(model, day.isoformat(), reason, owner=owner, say=say)
    return reason


def synthetic_inputs(config: PipelineConfig, store: Store) -> list[str]:
    """The input glob of the synthetic logs (what ``flows.pipeline.synthesize`` writes); a template with {date} for
    dated runs."""
    options = config.synthetic
    if config.dated:
        return [f"{store.synthetic_days_uri(options.rows, options.seed)}/{{date}}/part-*"]
    return [f"{store.synthetic_uri(options.rows, options.seed)}/part-*"]


def set_up(config: PipelineConfig, store: Store | None = None, date: dt.date | None = None,
           left_out: dict[dt.date, str] | None = None) -> Setup:
    """The setup of a pipeline run of ``config`` (for ``date`` when dated): the preset or tuned config applied,
    the settings checked together, the window's days found (a missing day, a bad template or a wrong split name
    fails here, before any work; a day the data gate quarantined is left out and the window reaches back past it:
    the model's standing verdicts over the whole look-back, and ``left_out``: day -> why) and the preprocessing
    config (synthetic inputs unless inputs are given; for a dated run the window's days as the `files` split
    rule)."""
    config, notes = config.with_preset()
    store = store or Store(config.store)
    config.check_dated()
    if config.dated and date is None:
        raise UserError("a dated run needs its date. Fix: pass --date YYYY-MM-DD, or let the schedule set it.")
    inputs = config.preprocess.inputs or synthetic_inputs(config, store)
    days = None
    if config.dated:
        quarantined = dict(left_out or {})
        if config.model and config.night.on_data_check != "off" and config.window.train_days:
            quarantined |= _quarantined(registry.model_uri(store.uri, config.model), absolute(inputs),
                                        lookback(date, config.window))   # as far as the window may reach back
        days = window(inputs, date, config.window, check=bool(config.preprocess.inputs), quarantined=quarantined)
        if config.model and (learned := _learned(config, registry.model_uri(store.uri, config.model), date)):
            days = days.after(learned)
        inputs = days.inputs()
    preprocess = config.preprocess_config(inputs, store.uri)
    config.check_splits(preprocess)
    return Setup(config, store, preprocess, date if config.dated else None, days, tuple(notes))


def record_setup_failed(config: PipelineConfig, store: Store, day: dt.date | None, error: BaseException,
                        owner: str | None = None, say: Say = _quiet) -> dict | None:
    """Record a dated night of a model whose setup failed before its flow started (``dlrmflow run`` sets up first: a
    window without enough days, a missing test day, a bad template) in the model's history: a ``failed`` line at
    stage setup (``registry.record_failed``), as the flow's failure hook records a night that fails in the flow.
    Returns it; None without a model or a date, for a repeated failure, or when the store cannot take it (said:
    the night's own error is what counts)."""
    if not (config.model and day):
        return None
    model = registry.model_uri(store.uri, config.model)
    try:
        return registry.record_failed(model, day.isoformat(), "setup",
                                      (str(error).strip().splitlines() or [type(error).__name__])[0], owner=owner,
                                      say=say)
    except Exception as e:  # noqa: BLE001 - the night's own failure is what counts
        say(f"could not record the failed night {day} in model {config.model}'s history: {type(e).__name__}: {e}")
        return None


def _quarantined(model: str, templates: tuple[str, ...], days: tuple[dt.date, ...]) -> dict[dt.date, str]:
    """Day -> why, for those of ``days`` whose standing verdict in ``model`` is quarantined (by their files now)."""
    lines = registry.day_verdicts(model)
    out = {}
    for day in days:
        if not any(line.get("day") == day.isoformat() for line in lines):
            continue
        verdict = datacheck.standing(lines, day.isoformat(), _identities(templates, day))
        if verdict is not None and verdict["verdict"] == datacheck.QUARANTINED:
            out[day] = f"{verdict.get('why') or 'quarantined'}; by {verdict.get('by')}"
    return out


def _identities(templates: tuple[str, ...], day: dt.date) -> dict[str, str] | None:
    """Input URI -> identity of ``day``'s files now (None when they cannot be listed: judged again after the parse)."""
    try:
        return {f.uri: f.identity for f in expand([fill_date(t, day) for t in templates])}
    except UserError:
        return None


@dataclass(frozen=True)
class DataGate:
    """The data gate's verdict on a night: the night's ``summary`` (``nightly.datacheck.summary``, what the
    history records), every check, the test day's failed ones (``failed``: they fail the night, or refuse the
    promotion under ``warn``), the window's days quarantined now that the setup still reads (``left_out``: day ->
    why; the night is set up again without them), the verdicts made now, the days without a stored profile and
    the failure's one-line reason (None: the test day passed)."""

    summary: dict
    checks: list
    failed: list
    left_out: dict[dt.date, str]
    new: list[dict]
    unchecked: list[dt.date]
    reason: str | None

    SHOWN = 5   # failed checks named in the reason (all are in the summary)

    @property
    def refusals(self) -> tuple[str, ...]:
        """The test day's failed checks' texts: each refuses a promotion."""
        return tuple(datacheck.Check(**row).text() for row in self.summary["failed"])


def check_days(setup: Setup, owner: str | None = None, say: Say = _quiet) -> DataGate:
    """Judge the window's days from the profiles their parses stored (no pass over the data): each day without a
    standing verdict against its reference in the model's history, the test day's unseen values against the
    champion's vocabulary too (``nightly.datacheck.judge``); the verdicts made now are recorded in the model's
    days.jsonl. A gate that cannot judge (a days.jsonl line that is not JSON, a lock not had...) records the night
    as failed at `data check` in the model's history before its error goes on (the flow's failure hook leaves the
    data gate's stage to it)."""
    try:
        return _check_days(setup, owner, say)
    except Exception as e:
        if setup.model:
            error = (str(e).splitlines() or [type(e).__name__])[0]
            try:
                registry.record_failed(setup.model, setup.window.date.isoformat(), "data check", error, owner=owner,
                                       say=say)
            except Exception as again:  # noqa: BLE001 - the gate's own error is what counts
                say(f"could not record the failed night {setup.window.date} in model {setup.config.model}'s history: "
                    f"{type(again).__name__}: {again}")
        raise


def _check_days(setup: Setup, owner: str | None, say: Say) -> DataGate:
    config, days = setup.config, setup.window
    stored = StoredProfiles(setup.preprocess)
    identities = stored.identities()
    files: dict[dt.date, list[tuple[str, dict | None]]] = {}
    for uri, profile in stored.profiles():
        if (day := days.owns(uri)) is not None:
            files.setdefault(day, []).append((uri, profile))
    unchecked = [d for d in days.days if any(p is None for _, p in files.get(d, [(None, None)]))]
    checked = [d for d in days.days if d not in unchecked]
    stats = [datacheck.day_stats(d.isoformat(), [p for _, p in files[d]]) for d in checked]
    unseen = _unseen(setup, stored, files, checked, say) if checked and checked[-1] == days.date else ({}, {}, None)
    test_day = days.date.isoformat()
    lines = registry.day_verdicts(setup.model) if setup.model else []
    judged = datacheck.judge(stats, {d.isoformat(): {u: identities[u] for u, _ in files[d]} for d in checked}, lines,
                             config.data_check, *unseen, test_day=test_day,
                             at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    if setup.model and judged.new:
        registry.record_verdicts(setup.model, judged.new, owner=owner, say=say)
    for line in judged.new:
        say(f"data gate: day {line['day']} {line['verdict']}" + (f" ({line['why']})" if line["why"] else ""))
    shift = datacheck.shift_text(judged.shift, config.model)
    if shift:
        say(f"data gate: {shift}")
    summary = datacheck.summary(judged, config.night.on_data_check, test_day, [d.isoformat() for d in unchecked])
    summary["left_out"] |= {d.isoformat(): why for d, why in days.quarantined}   # left out when set up
    read = set(days.train + days.val)
    left_out = {dt.date.fromisoformat(d): why for d, why in judged.quarantined().items()
                if dt.date.fromisoformat(d) in read}
    failed = [datacheck.Check(**row) for row in summary["failed"]]
    texts = [c.text() for c in failed]
    more = (f"; and {len(texts) - DataGate.SHOWN} more (the data-checks artifact lists them)"
            if len(texts) > DataGate.SHOWN else "")
    reason = (f"the test day {test_day} is quarantined: {len(failed)} data check(s) failed: "
              f"{'; '.join(texts[:DataGate.SHOWN])}{more}" + (f"; {shift}" if shift else "")) if failed else None
    return DataGate(summary, judged.checks, failed, left_out, judged.new, unchecked, reason)


def record_gate_failed(setup: Setup, gate: DataGate, dataset: str | None, owner: str | None,
                       say: Say = _quiet) -> None:
    """Record a night that its data gate failed (its test day quarantined) in its model's history (no model:
    nothing)."""
    if setup.model:
        days = setup.window
        registry.record_data_failed(setup.model, days.date.isoformat(), [d.isoformat() for d in days.days],
                                    gate.summary, gate.reason, owner=owner, say=say, dataset=dataset)


@dataclass(frozen=True)
class ParseFailure:
    """A window day quarantined by the data gate because its parse failed on one of its own files: the day, its
    verdict line and, for the test day, the night's failure (``reason``; None: the night is set up again without
    the day, as for a day ``check_days`` quarantines)."""

    day: dt.date
    line: dict
    reason: str | None


def parse_failed(setup: Setup, error: BaseException, owner: str | None = None,
                 say: Say = _quiet) -> ParseFailure | None:
    """The data gate's verdict on the window day whose input file ``error`` blames (``preprocessing.errors.blamed``:
    a gzip cut short, malformed rows beyond the budget, bytes that cannot be read...): quarantined, why: the error's
    first line, recorded in the model's days.jsonl by the day's files now (``datacheck.unparsed``; a re-uploaded day
    is judged again). None, the error standing as it is, when it blames no file of the window's days (a full disk, a
    lost store, a setting), ``night.on_data_check`` is off, or the day has a standing verdict: a day is judged once,
    so a day accepted (by an operator, or before a setting changed) whose parse fails fails the night with the
    parse's error."""
    days, uri = setup.window, blamed(error)
    if days is None or uri is None or setup.config.night.on_data_check == "off":
        return None
    day = days.owns(uri)
    files = _identities(days.templates, day) if day in days.days else None
    if files is None or (setup.model and datacheck.standing(registry.day_verdicts(setup.model), day.isoformat(),
                                                             files) is not None):
        return None
    line = datacheck.unparsed(day.isoformat(), files, (str(error).splitlines() or [type(error).__name__])[0],
                              at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    if setup.model:
        registry.record_verdicts(setup.model, [line], owner=owner, say=say)
    say(f"data gate: day {day} {line['verdict']} ({line['why']})")
    reason = (f"the test day {day} is quarantined: {line['why']} Later windows leave the day out until its files "
              "change (then it is judged again)") if day == days.date else None
    return ParseFailure(day, line, reason)


def _unseen(setup: Setup, stored: StoredProfiles, files: dict, checked: list[dt.date],
            say: Say) -> tuple[dict, dict, str | None]:
    """(the test day's unseen shares, those of the newest earlier day the champion never trained on, that day)
    by the champion's vocabulary; ({}, {}, None) without a champion older than the test day or such a day."""
    if not setup.model:
        return {}, {}, None
    days = setup.window
    champion, _ = registry.usable_champion(setup.model, days.date.isoformat())
    if champion is None:
        return {}, {}, None
    before = datacheck.unseen_reference([d.isoformat() for d in checked], champion.window, champion.date)
    if before is None:
        say(f"data check: no day of the window before {days.date} that the champion (tested on {champion.date}) "
            "never trained on: no unseen check")
        return {}, {}, None
    shares = stored.unseen({"test": [u for u, _ in files[days.date]],
                            "before": [u for u, _ in files[dt.date.fromisoformat(before)]]}, champion.dataset)
    return shares.get("test", {}), shares.get("before", {}), before


def compete(setup: Setup, run: RunDir, dataset: str, metrics: dict, gate: DataGate | None = None,
            owner: str | None = None, say: Say = _quiet) -> dict:
    """The night's new model against the champion of its model on the test day: scored (each with its own
    vocabulary, its ranks started by the pipeline's launcher), decided and recorded (promoted or kept:
    ``models.registry.record``'s ordered commit, the bundle first) under the model's lock, with the night's data
    gate (a failed check keeps the champion); a re-run of a decided night scores nothing and repairs. Returns the
    history line."""
    config, days, model = setup.config, setup.window, setup.model
    candidate = {"run": run.uri, "step": metrics["step"], "dataset": dataset,
                 "vocab": posixpath.join(dataset, "vocab"), "date": days.date.isoformat(),
                 "window": [d.isoformat() for d in days.days]}
    done = registry.decided(model, days.date.isoformat(), run.uri)
    if done is not None:   # a re-run of a night already decided: nothing to score again; record() repairs
        say(f"model {config.model} on {days.date}: already decided ({done['decision']})")
        mine = {k: math.nan if v is None else v for k, v in done["challenger"].items()}
        return registry.record(model, registry.NightRecord({**candidate, "metrics": mine}, say=say, owner=owner,
                                                           export=_export_verified))
    champion = registry.load_champion(model)
    compared = (champion is not None and champion.run != run.uri
                and registry.ineligible(champion, days.date.isoformat()) is None)
    by = config.evaluate.slice_by   # both models per slice of the same rows (models.slices)
    if config.promote.slice_max_loss is not None and not by:
        raise UserError(f"promote.slice_max_loss {config.promote.slice_max_loss:g} needs slices, but evaluate.slice_by "
                        "is not set. Fix: set evaluate.slice_by to a categorical feature (e.g. C3), or leave "
                        "promote.slice_max_loss out.")
    with tempfile.TemporaryDirectory(prefix="dlrmflow-compete-") as scratch:   # scores only feed the comparison
        scored: dict[str, tuple[dict, RowScores]] = {}
        keys: dict[str, object] = {}   # side -> each scored row's raw value of the slice feature

        def score(side: str, slice_by: str | None = None, **which) -> tuple[dict, RowScores]:
            """The test day scored by ``which`` (once per side): its metrics and its per-row scores."""
            if side not in scored:
                out = os.path.join(scratch, f"{side}.parquet")
                summary = scoring.score(ScoreConfig(**which, inputs=days.test_inputs(), out=out, progress=False),
                                        launcher=config.launcher, on_line=say,
                                        **({"slice_by": slice_by} if slice_by else {}))
                rows = scoring.row_scores(out)   # only a complete output (its marker checked)
                if slice_by:
                    keys[side] = scoring.slice_keys(out, slice_by)
                scored[side] = {k: summary.get(k) for k in METRICS} | {"fingerprint": rows.fingerprint}, rows
            return scored[side]

        def challenger() -> tuple[dict, RowScores]:
            return score("challenger", slice_by=by, run=run.uri, checkpoint=metrics["step"])

        def measure(current: registry.Champion) -> dict:
            """The champion on the same rows as the challenger, with the paired comparison of the two, both per
            slice, and the champion's watch against its own earlier nights (``models.watch``)."""
            say(f"scoring the champion ({current.run}, step {current.step}) on {days.date} with its own vocabulary")
            theirs, their_rows = score(f"champion-{registry.bundle_name(current.run)}", model=model)
            mine = challenger()[1]
            found = theirs | {"paired": paired(mine, their_rows, config.promote.confidence)}
            if by:
                found["slices"] = slices.compare(by, keys["challenger"], mine, their_rows, config.evaluate.slice_top)
            earlier = watch.series(registry.history(model), current.run, days.date.isoformat())
            return found | {"watch": watch.watch(earlier, theirs, config.promote)}

        if compared or config.evaluate.split != "test" or config.evaluate.dataset:
            mine = challenger()[0]   # a comparison needs both models' scores of the same rows
        else:
            mine = {k: metrics.get(k) for k in METRICS}   # evaluation scored exactly the test day, this vocabulary
        entry = registry.record(model, registry.NightRecord(
            {**candidate, "metrics": mine}, champion_metrics=measure(champion) if compared else None,
            champion_run=champion.run if champion else None, gates=config.promote, score_champion=measure, say=say,
            owner=owner, export=_export_verified, data_checks=gate.summary if gate else None,
            failed_checks=gate.refusals if gate else ()))
    say(f"model {config.model} on {days.date}: {entry['decision']} ({entry['reason']})")
    if entry.get("slices"):
        say(slices.describe(entry["slices"]))
    for why in watch.degraded(entry):
        say(f"model {config.model} on {days.date}: the champion degraded: {why}")
    if entry["decision"] in registry.PROMOTING:
        say(f"serving bundle of the new champion: "
            f"{posixpath.join(model, registry.BUNDLES, registry.bundle_name(run.uri))}")
    return entry


def _export_verified(*args, **kwargs):
    """training.export.export_verified, imported when a champion is exported (it imports torch: seconds that
    a night which promotes nothing need not spend)."""
    from training import export_verified

    return export_verified(*args, **kwargs)
