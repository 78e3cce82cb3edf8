"""The Launcher base and what all launchers share: the rank job (``RankJob``: the worker module and its
arguments), the dataset check and config save before a training's ranks start, the run's lease and the job it
records, the ranks' environment from RCCL/NCCL profiles (infra/rccl/<name>.env), the infra/ folder and
``{{ name }}`` templates."""

from __future__ import annotations

import logging
import os
import re
from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from common.errors import UserError
from common.lease import Lease
from common.lease import lease as hold_lease
from common.store import filesystem
from common.store_errors import store_error
from feature_spec import file_uri
from feature_spec import load as load_spec
from training.checkpoint import Checkpointer
from training.config import HOLDOUT, TrainConfig
from training.launchers.config import KubernetesLauncherConfig, LocalLauncherConfig, SlurmLauncherConfig
from training.rundir import RunDir, run_name

OnLine = Callable[[str], None]
Started = Callable[[dict], None]   # a launcher's report of the job it started (``Launcher.start``)
ENV_INFRA_DIR = "DLRMFLOW_INFRA_DIR"
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PLACEHOLDER = re.compile(r"\{\{\s*([a-z_][a-z0-9_]*)\s*\}\}")


class LaunchError(UserError):
    """The job could not be submitted or watched (not: training failed, which is a non-zero exit code)."""


def infra_dir() -> Path:
    """``$DLRMFLOW_INFRA_DIR``, else the repository's ``infra/`` (images copy it to /opt/dlrmflow/infra)."""
    path = Path(os.environ.get(ENV_INFRA_DIR) or Path(__file__).resolve().parents[2] / "infra")
    if not path.is_dir():
        raise UserError(f"infra folder {path} does not exist. Fix: set {ENV_INFRA_DIR} to the infra/ folder of "
                        "a dlrmflow checkout (the images set it to /opt/dlrmflow/infra).")
    return path


def profile_path(name_or_path: str) -> Path:
    """``infra/rccl/<name>.env`` for a profile name, else the given path."""
    if "/" in name_or_path or name_or_path.endswith(".env"):
        path = Path(name_or_path).expanduser()
    else:
        path = infra_dir() / "rccl" / f"{name_or_path}.env"
    if not path.is_file():
        known = sorted(p.stem for p in (infra_dir() / "rccl").glob("*.env"))
        raise UserError(f"RCCL profile '{name_or_path}' not found ({path}). Fix: use one of {', '.join(known)} "
                        "or the path of a KEY=VALUE .env file.")
    return path


def read_env_file(path: str | Path) -> dict[str, str]:
    """KEY=VALUE lines ('#' comments, blank lines) -> dict. The strict subset that bash ``set -a; .``,
    ``kubectl create configmap --from-env-file`` and ``docker --env-file`` all read the same way."""
    env: dict[str, str] = {}
    for n, raw in enumerate(Path(path).read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not _KEY.match(key) or re.search(r"[\s'\"$`\\]", value):
            raise UserError(f"{path}:{n}: '{raw}' is not KEY=VALUE (no spaces, quotes or $ in the value).")
        env[key] = value
    return env


def profile_env(names: list[str]) -> dict[str, str]:
    """The merged environment of the named profiles (later ones win)."""
    env: dict[str, str] = {}
    for name in names:
        env.update(read_env_file(profile_path(name)))
    return env


def render(template: str, values: dict[str, object], source: str = "template") -> str:
    """Replace every ``{{ name }}``; a placeholder without a value is an error (never left in the output)."""
    missing = sorted({m for m in _PLACEHOLDER.findall(template) if m not in values})
    if missing:
        raise LaunchError(f"{source}: no value for {', '.join(missing)}")
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), template)


@dataclass(frozen=True)
class RankJob:
    """What every rank of a job runs: ``python -m MODULE RUN ARGS...`` under torchrun. ``name`` (train, evaluate,
    score) is in the cluster job's name and labels; ``tag`` tells apart jobs of one name on one run that may run at
    once (a scoring's scratch folder). ``train_job``, ``training.evaluate.evaluate_job`` and
    ``training.score.score_job`` make them."""

    name: str
    module: str
    args: tuple[str, ...] = ()
    tag: str = ""

    def argv(self, run_uri: str) -> list[str]:
        """The rank module's arguments: the run folder, then the job's own."""
        return [run_uri, *self.args]

    def label(self, run_uri: str) -> str:
        """``<name>-<run>[-<tag>]``: what the cluster job is called (after ``dlrmflow-``)."""
        return "-".join(part for part in (self.name, run_name(run_uri), self.tag) if part)


def train_job(resume: bool = False) -> RankJob:
    """The training job: ``training.train_worker RUN [--resume]`` (it reads ``RUN/config.yaml``)."""
    return RankJob("train", "training.train_worker", ("--resume",) if resume else ())


class Launcher(ABC):
    """Runs the ranks of a job (``RankJob``: train, evaluate, score) with one set of settings, and waits for them.

    ``run_ranks`` starts any job's ranks, hands every output line to ``on_line`` (or prints it) and returns the
    job's exit code (0: done; else the failing rank's). The run folder (its first argument) must be reachable
    from wherever the ranks run: s3:// or a shared file system. ``launch`` is training: it checks the dataset and
    that a warm start's run lies in the run's store (``InitFrom.check_store``),
    takes the run folder's lease (``lease``: a second training of the same folder waits ``wait_s``, by default not
    at all, and fails naming the holder; never two trainings in one folder) and writes the resolved config to
    ``<run>/config.yaml`` (the ranks read it from there), then runs the train job.

    The lease's holder is this process, not the job, which may outlive it (a killed flow's Slurm job, Kubernetes
    Job or stray rank): ``run_ranks`` under a held lease records the job in it once it is started (``start``
    reports it: ``{"kind", "what", ...}``) and removes it once the job has ended; a take-over of a stale run lease
    that records a job first stops it with ``fence`` of the launcher of the job's kind (``scancel``, ``kubectl
    delete job``, a kill of the local process group), or refuses naming the job and the fix.
    """

    kind: str
    kinds: dict[str, type[Launcher]] = {}   # kind -> launcher class (each registers itself)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            Launcher.kinds[cls.kind] = cls

    def __init__(self, settings=None):
        default = {"local": LocalLauncherConfig, "slurm": SlurmLauncherConfig,
                   "kubernetes": KubernetesLauncherConfig}[self.kind]
        self.settings = settings or default()

    @property
    def world_size(self) -> int:
        """The job's ranks, over all its nodes."""
        s = self.settings
        return s.nodes * s.ranks_per_node

    @property
    def shares_files(self) -> bool:
        """Whether every rank runs on this machine and sees its local files (a local launcher of one node)."""
        return False

    @property
    def one_of_several(self) -> bool:
        """Whether this launcher is one node of a job started by hand on several nodes (their launchers are one
        job: none of them holds the run's lease for it)."""
        return False

    def environment(self, env: dict[str, str] | None = None) -> dict[str, str]:
        """The ranks' environment: the RCCL profiles, then the settings' env, then ``env``."""
        return {**profile_env(self.settings.rccl_profiles), **self.settings.env, **(env or {})}

    @contextmanager
    def lease(self, run: RunDir, what: str, wait_s: float = 0.0, say: OnLine | None = None) -> Iterator[Lease | None]:
        """Hold the run folder's lease for a job that writes the run (``what``: training, evaluation), as
        ``RunDir.lease`` does, and stop the job that a stale lease records before taking it over (``fence_job``);
        none for one node of a hand-started job (``one_of_several``). Pass it to ``run_ranks`` to record the job."""
        if self.one_of_several:
            yield None
            return
        emit = say or logging.getLogger(__name__).info
        with hold_lease(run.join(RunDir.LEASE), None, f"run lease ({what})", f"run {run.uri}", wait_s,
                        RunDir.LEASE_STALE_S, say=say, heartbeat_s=RunDir.LEASE_STALE_S / 5,
                        fence=lambda job: self.fence_job(job, run, emit)) as held:
            yield held

    def fence_job(self, job: dict, run: RunDir, say: OnLine) -> str:
        """Stop the job that a stale lease of ``run`` records (``job``: what ``start`` reported) with the launcher
        of its kind (this one's settings when it is of that kind: its scancel, kubectl...); returns what was done.
        LaunchError naming the job and the fix when it cannot be stopped: the lease is not taken over."""
        kind = job.get("kind")
        if kind not in Launcher.kinds:
            raise LaunchError(f"{run}: the previous holder of its lease recorded a job of unknown kind {kind!r} "
                              f"({job.get('what')}). Fix: make sure it has ended, then remove "
                              f"{run.join(RunDir.LEASE)} and re-run.")
        launcher = self if kind == self.kind else Launcher.kinds[kind]()
        say(f"dlrmflow: the lease of {run} is stale (its holder is gone or expired): stopping its job "
            f"({job.get('what')}) before taking it over")
        return launcher.fence(job, run, say)

    def fence(self, job: dict, run: RunDir, say: OnLine) -> str:
        """Stop ``job`` (of this launcher's kind, as ``start`` reported it) and wait, bounded, until it has ended;
        returns a line saying what was done. LaunchError (one line naming the job and the fix) when it may still
        run: the stale lease of ``run`` is then not taken over."""
        raise LaunchError(f"{run}: the {self.kind} launcher cannot stop the previous holder's job "
                          f"({job.get('what')}). Fix: make sure it has ended, then remove {run.join(RunDir.LEASE)} "
                          "and re-run.")

    def run_ranks(self, job: RankJob, run: RunDir | str, *, env: dict[str, str] | None = None,
                  on_line: OnLine | None = None, lease: Lease | None = None) -> int:
        """Start ``job``'s ranks on ``run`` with these settings and wait; returns the job's exit code. ``env``:
        extra environment of the ranks (e.g. PET_TEE=3 for rank prefixes). ``lease``: the run's lease held for the
        job (``lease``): the job is recorded in it while it runs, for a take-over to stop it (``fence``)."""
        on_line = on_line or (lambda line: print(line, flush=True))
        recorded: list[dict] = []

        def started(info: dict) -> None:
            lease.record({"job": info})   # LockLost: the job is stopped by its launcher (start's error path)
            recorded.append(info)

        code = self.start(job, RunDir(run), env=env, on_line=on_line, started=started if lease else None)
        if recorded:   # the job has ended: nothing for a take-over to stop
            try:
                lease.record({"job": None})
            except Exception as e:   # noqa: BLE001  a store hiccup: the lease is released (or expires) soon after
                if not isinstance(e, OSError) and store_error(e) is None:
                    raise
                on_line(f"dlrmflow: could not remove the ended job from the run lease ({store_error(e) or e})")
        return code

    def launch(self, run: RunDir | str, cfg: TrainConfig, *, resume: bool = False,
               env: dict[str, str] | None = None, on_line: OnLine | None = None, wait_s: float = 0.0,
               reuse: bool = False) -> int:
        """Train ``cfg`` into ``run`` (see the class doc); ``wait_s``: how long to wait for another training or
        evaluation of the run folder. ``reuse`` (a flow's run of a night, which another run of the same night may
        overlap): decided once the lease is held, in one step with the wait: a run folder that training completed
        meanwhile is reused (0, nothing trained), and one with checkpoints is resumed."""
        run = RunDir(run)
        on_line = on_line or (lambda line: print(line, flush=True))
        cfg = check_dataset(cfg)
        if cfg.init_from is not None:   # a warm start loads its checkpoint: from the run's store (or one named)
            cfg.init_from.check_store(run.uri)
        with self.lease(run, "training", wait_s, say=on_line) as held:
            if reuse and run.is_complete():
                on_line(f"training of {run} already complete (another run of it finished while this one waited): "
                        "reusing it")
                return 0
            if reuse:
                resume = Checkpointer(run).step_of("latest") is not None
            if resume:
                check_resume(run, cfg)
            run.save_config(cfg)
            code = self.run_ranks(train_job(resume), run, env=env, on_line=on_line, lease=held)
            if code == 0 and held is not None:
                held.check()   # the run was ours throughout (a lost lease: another training may have written it)
        return code

    @abstractmethod
    def start(self, job: RankJob, run: RunDir, *, env: dict[str, str] | None, on_line: OnLine,
              started: Started | None = None) -> int:
        """Start the ranks of ``job`` on ``run`` and wait for them; returns the job's exit code. ``started`` (when
        given) is called once the job exists with what identifies it for ``fence`` (``{"kind": self.kind, "what":
        a line naming it, ...}``); an error it raises stops the job again."""

    def describe(self) -> str:
        """One line for the logs: where the ranks run."""
        return self.kind


def check_dataset(cfg: TrainConfig) -> TrainConfig:
    """Fail fast, before torchrun starts, when the dataset, its training or validation split or one of
    the training split's files is missing: a one-line UserError here instead of every rank failing. Returns the
    config resolved as the run keeps it (``TrainConfig.resolved``: the holdout's rows when it validates on one)."""
    if not cfg.dataset:
        raise UserError("no dataset given. Fix: set dataset (--dataset) to a folder written by preprocessing.")
    spec = load_spec(cfg.dataset)
    cfg.check_splits(spec.splits)
    split = cfg.data.train_split
    if not spec.is_dataset:
        raise UserError(f"{cfg.dataset}: this feature spec describes raw input, not a split_binary dataset. "
                        "Fix: run `dlrmflow preprocess` on it and pass the dataset folder it writes.")
    files = sorted({file_uri(cfg.dataset, f) for chunk in spec.source_spec[split] for f in chunk.files})
    fs, _ = filesystem(files[0])
    missing = [f for f in files if not fs.exists(f)]
    if missing:
        raise UserError(f"{missing[0]}: data file of split '{split}' is missing"
                        f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}. "
                        "Fix: re-run preprocessing, or correct the path in the feature spec.")
    return cfg.resolved(spec)


def check_resume(run: RunDir, cfg: TrainConfig) -> None:
    """UserError for a resume that would change the rows a run trains on: a run of before the holdout, which
    trained on every row of a dataset without 'val' (and validated on 'test'), resumed now that ``cfg`` sets the
    end of them aside (eval_split 'holdout')."""
    if cfg.eval_split != HOLDOUT or not run.has_config() or run.load_config().eval_split == HOLDOUT:
        return
    if Checkpointer(run).steps():
        raise UserError(f"{run}: this run trained on all the rows of split '{cfg.data.train_split}' and validated on "
                        "'test' (the dataset has no 'val'); resumed now, it would set the last "
                        f"{cfg.data.holdout_rows} of them aside to validate on. Fix: train a new run (another --run).")
