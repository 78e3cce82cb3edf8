"""`dlrmflow serve`: the four flows as deployments on a Prefect server, the pipeline on a cron schedule."""

from __future__ import annotations

HELP = "Serve the pipeline (on a cron schedule), preprocess, train and evaluate as Prefect deployments."
DESCRIPTION = HELP + """

Needs a running Prefect server and PREFECT_API_URL pointing at it, e.g.:
  PREFECT_SERVER_API_HOST=127.0.0.1 PREFECT_SERVER_API_PORT=4200 prefect server start
  export PREFECT_API_URL=http://127.0.0.1:4200/api
  dlrmflow serve --store s3://bucket/dlrm --cron "0 2 * * *"
Then open http://127.0.0.1:4200/deployments and press Run on any of them. Stop with Ctrl-C
(the pipeline's schedule is paused until serve runs again).
"""


def add_arguments(parser) -> None:
    parser.add_argument("--store", metavar="URI",
                        help="artifact store root (default $DLRMFLOW_STORE, else ./artifacts)")
    parser.add_argument("--cron", default="0 2 * * *", help="the pipeline's schedule (default nightly at 02:00 UTC)")


def run(args) -> int:
    import os

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from prefect.logging.configuration import setup_logging
    setup_logging()  # before torch: fbgemm's import-time logging.info() would install a plain root handler
    from prefect.client.schemas.schedules import CronSchedule
    from prefect.settings import PREFECT_API_URL
    from pydantic import ValidationError

    from common.errors import UserError
    from flows.store import Store

    if not PREFECT_API_URL.value():
        raise UserError("serve needs a Prefect server. Fix: start one (prefect server start) and set "
                        "PREFECT_API_URL, e.g. http://127.0.0.1:4200/api.")
    store = Store(args.store)
    store.check()
    try:
        CronSchedule(cron=args.cron)
    except ValidationError:
        raise UserError(f"--cron {args.cron!r} is not a cron expression. "
                        "Fix: e.g. \"0 2 * * *\" (02:00 daily).") from None
    from flows.deploy import serve_all
    print(f"serving 4 deployments (pipeline: cron '{args.cron}'), store {store.uri}", flush=True)
    serve_all(store.uri, args.cron)
    return 0
