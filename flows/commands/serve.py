"""`dlrmflow serve`: the flows as deployments on a Prefect server, the pipeline on a cron schedule."""

from __future__ import annotations

from common.errors import UserError
from common.store import Store
from flows.config import ServeConfig
from flows.options import NPROC_ALIAS, add_options, build

DESCRIPTION = """\
Needs a running Prefect server and PREFECT_API_URL pointing at it, e.g.:
  PREFECT_SERVER_API_HOST=127.0.0.1 PREFECT_SERVER_API_PORT=4200 prefect server start
  export PREFECT_API_URL=http://127.0.0.1:4200/api
  dlrmflow serve --store s3://bucket/dlrm --cron "0 2 * * *"
  dlrmflow serve --input 's3://logs/{date}/*.gz' --train-days 7 --model ctr --cron "0 2 * * *"
The pipeline options (those of dlrmflow run) are the scheduled runs' parameters. With a dated input
template and --train-days, each night's run is for yesterday (--lag-days 1): it trains on the
--train-days days before that day, tests on it, and promotes the new model of --model when it beats
the champion. Runs of the pipeline queue, one at a time.
With --model and a dated input template, serve also runs the day-landed sensor (deployment
dlrmflow-day-landed-NAME, every --landing.every-s seconds): a day complete by its rule (default: a
_SUCCESS marker in the day's folder) starts its night at once, once a day; the cron schedule is the
fallback. --landing.every-s 0 turns it off.
serve prints the UI's address and each deployment it registered with its schedule (with --model, also the
model's page); open the UI's deployments page and press Run on any of them. Stop with Ctrl-C or
SIGTERM: all the deployments are paused and the pipeline's upcoming scheduled runs removed until
serve runs again. If the server stops answering, serve ends with an error.
"""

EVERYDAY = ("--store", "--cron", "--timezone", "--inputs", "--spec", "--split", "--preset", "--train-days", "--model",
            "--nproc", "--launcher")


def add_arguments(parser) -> None:
    add_options(parser, ServeConfig, skip={"pipeline.store", "pipeline.window.timezone"},
                flatten={"pipeline", "pipeline.preprocess", "pipeline.train", "pipeline.window"},
                aliases={f"pipeline.{path}": flag for path, flag in NPROC_ALIAS.items()})


def run(args) -> int:
    from prefect.settings import PREFECT_API_URL   # heavy: Prefect, not for --help

    from flows.deploy import serve_all   # heavy: Prefect and every flow

    if not PREFECT_API_URL.value():
        raise UserError("serve needs a Prefect server. Fix: start one (prefect server start) and set "
                        "PREFECT_API_URL, e.g. http://127.0.0.1:4200/api.")
    config = build(ServeConfig, args)
    store = Store(config.store)
    store.check()
    print(f"serving the deployments (pipeline: cron '{config.cron}' {config.timezone}), store {store.uri}", flush=True)
    serve_all(config.model_copy(update={"store": store.uri}))
    return 0
