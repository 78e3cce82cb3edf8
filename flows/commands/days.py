"""`dlrmflow days`: a model's days and the data gate's verdicts on them; accept or quarantine one, or accept a new
normal."""

from __future__ import annotations

import sys

from common.errors import UserError
from flows.options import add_options, build
from nightly.config import DaysConfig
from nightly.days import run_days

DESCRIPTION = """\
The data gate judges each day a model's nights read once, against the accepted days before it in the model's
history, and records the verdict (store/models/NAME/days.jsonl): accepted, or quarantined with its failed checks.
A quarantined day is left out of every window that holds it; a quarantined test day fails its night. A verdict
stands until the day's content changes (a re-uploaded day is judged again; a chmod changes nothing) or an operator
overrides it here (who and why are recorded). When a few days in a row are quarantined but agree with each other (a new normal: a real change, or a
lasting fault), the night names it; `accept-shift DATE` accepts DATE and the later quarantined days at once, and
the days after them are judged against them. Only a model of the store and a day the gate has judged can be
overridden. The Prefect UI has the same as the `days` flow.

examples:
  dlrmflow days --model ctr --store s3://bucket/dlrm
  dlrmflow days --model ctr accept 2026-11-05 --why "a sale: the click rate was real"
  dlrmflow days --model ctr quarantine 2026-11-07 --why "the logger dropped half the clicks"
  dlrmflow days --model ctr accept-shift 2026-11-10 --why "the new ranking: more clicks from now on"
"""


def add_arguments(parser) -> None:
    parser.add_argument("verb", nargs="?", choices=("accept", "quarantine", "accept-shift"),
                        help="override the verdict on DATE, or adopt a new normal since DATE")
    parser.add_argument("day", nargs="?", metavar="DATE", help="the day to accept or quarantine, or the first day of "
                        "the new normal (YYYY-MM-DD)")
    add_options(parser, DaysConfig, root="days", skip={"action", "day"})


def run(args) -> int:
    if bool(args.verb) != bool(args.day):
        raise UserError("accept, quarantine and accept-shift need a day. Fix: e.g. dlrmflow days --model NAME "
                        "accept 2026-11-05 --why '...'.")
    config = build(DaysConfig, args, {"action": args.verb or "list", "day": args.day}, root="days")
    rows = run_days(config, say=lambda line: print(line, file=sys.stderr, flush=True))
    if not rows:
        print(f"model {config.model}: no day judged yet (the data gate judges each day the first night that reads it)")
        return 0
    widths = {k: max(len(k), *(len(str(r[k])) for r in rows)) for k in rows[0]}
    print("  ".join(k.ljust(w) for k, w in widths.items()))
    for r in rows:
        print("  ".join(str(r[k]).ljust(w) for k, w in widths.items()).rstrip())
    return 0
