"""`dlrmflow`: one console script, one module per subcommand under ``flows/commands/``.

``COMMANDS`` names each command's module and one-line help. A command module defines ``DESCRIPTION`` (optional, shown
by ``--help`` under the one-line help), ``add_arguments(parser)``, ``run(args) -> int`` and, when it has many
options, ``EVERYDAY``: the flags ``--help`` shows (``--help-all`` shows all; every option parses either way).
A module is imported only when its command runs (or shows its ``--help``), so ``dlrmflow --help`` imports none
of them. A command module imports what it uses at its top, but for what costs torch or Prefect (a flow, the sharding
planner), imported in the function that needs it with a comment saying so (tests/test_layout.py checks it): so
``dlrmflow preprocess`` and every command's ``--help`` never pay for importing torch or Prefect.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import logging
import os
import re
import sys
import traceback

from common.errors import UserError

# command -> (its module, its one-line help): `dlrmflow --help` lists them without importing a command module
COMMANDS = {
    "synth": ("flows.commands.synth",
              "Generate synthetic Criteo-format click logs (labels from a planted model with a known best AUC)."),
    "preprocess": ("flows.commands.preprocess",
                   "Turn raw click logs (Criteo TSV, CSV, Parquet) into a split-binary dataset with vocabularies."),
    "inspect": ("flows.commands.inspect", "Print a preprocessed dataset's summary (rows per split, cardinalities, "
                "dtypes, share of index 0, hotness and mean/max list length)."),
    "spec": ("flows.commands.spec", "Check an input spec (against a sample of its data), or draft one from the data."),
    "train": ("flows.commands.train", "train a sharded TorchRec DLRM on a dataset (torchrun, Slurm or Kubernetes; "
              "checkpoints; resume)"),
    "evaluate": ("flows.commands.evaluate", "evaluate a run's checkpoint on a split: AUC, log loss, NE, accuracy, "
                 "calibration, PR AUC + plots"),
    "score": ("flows.commands.score", "score raw rows with a model's champion (or a run's checkpoint, or a bundle): "
              "click probabilities as Parquet"),
    "export": ("flows.commands.export",
               "export a model's champion (or a run's checkpoint) as a self-contained serving bundle"),
    "plan": ("flows.commands.plan",
             "Plan embedding sharding for a hardware profile and world size (no training, no GPUs needed)."),
    "tune": ("flows.commands.tune", "search the training config for a dataset (Optuna TPE, pruning, parallel trials; "
             "resumes after a kill)"),
    "run": ("flows.commands.run",
            "Run the pipeline: [synthetic data ->] preprocess -> train (torchrun) -> evaluate, as Prefect flows."),
    "serve": ("flows.commands.serve",
              "Serve the pipeline (on a cron schedule), preprocess, train and evaluate as Prefect deployments."),
    "serve-model": ("flows.commands.serve_model",
                    "serve a bundle's models over the Open Inference Protocol (KServe v2, Triton's HTTP API)"),
    "render": ("flows.commands.render", "print the Slurm batch script or Kubernetes manifest that `train --launcher "
               "slurm|kubernetes` would submit"),
    "gc": ("flows.commands.gc", "Clean a store: remove the runs, datasets, parsed parts, work folders and leftovers "
           "nothing needs any more."),
    "days": ("flows.commands.days", "List a model's days and the data gate's verdicts; accept or quarantine a day, or "
             "accept a new normal."),
}


def _available() -> dict[str, tuple[str, str]]:
    return {name: entry for name, entry in COMMANDS.items() if importlib.util.find_spec(entry[0]) is not None}


class Parser(argparse.ArgumentParser):
    """An option is its whole name (``--epoch`` is not taken for ``--epochs``: no abbreviations), and an unknown
    option or command is named with the nearest known one, under the usage of the (sub)command it was given to."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def options(self) -> list[str]:
        return [o for o in self._option_string_actions if o.startswith("--")]

    def unknown(self, token: str) -> str:
        """``unrecognized option --inptu: did you mean --input?`` (the nearest option, when one is near)."""
        name = token.split("=", 1)[0]
        near = difflib.get_close_matches(name, self.options(), n=1, cutoff=0.6)
        near = near or [o for o in self.options() if o.startswith(name)][:1]   # an abbreviation, refused
        return f"unrecognized option {name}" + (f": did you mean {near[0]}?" if near else
                                                 f". Fix: see `{self.prog} --help-all`.")

    def error(self, message: str):
        if choice := re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message):
            names = re.findall(r"'([^']*)'", choice.group(2))
            if near := difflib.get_close_matches(choice.group(1), names, n=1):
                message += f"; did you mean {near[0]}?"
        super().error(message)


def _unknown_options(parser: Parser, argv: list[str]) -> list[str]:
    """The ``--options`` of ``argv`` that ``parser`` does not know (before a ``--`` that ends the options)."""
    tokens = argv[:argv.index("--")] if "--" in argv else argv
    known = set(parser.options())
    return [t for t in tokens if t.startswith("--") and len(t) > 2 and t.split("=", 1)[0] not in known]


def build_parser(only: str | None = None, help_all: bool = False) -> argparse.ArgumentParser:
    """The command list; with ``only``, that command's options too (all listed by --help with ``help_all``)."""
    parser = Parser(
        prog="dlrmflow",
        description="Raw click logs in, a trained and evaluated TorchRec DLRM out.",
    )
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error (before the command)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name, (mod_name, line) in _available().items():
        if only is None:   # the full listing: each command's one-line help, no command module imported
            sub.add_parser(name, help=line)
            continue
        if name != only:
            sub.add_parser(name)
            continue
        mod = importlib.import_module(mod_name)   # the command's module: what it imports at its top (no torch)
        description = line + (f"\n\n{mod.DESCRIPTION}" if getattr(mod, "DESCRIPTION", None) else "")
        p = sub.add_parser(name, help=line, description=description,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
        _everyday_help(p, None if help_all else getattr(mod, "EVERYDAY", None))
    return parser


def _everyday_help(p: argparse.ArgumentParser, everyday: tuple[str, ...] | None) -> None:
    """``--help`` lists only the options named in ``everyday`` (None: all) and says how many ``--help-all`` lists."""
    options = [a for a in p._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]
    hidden = [a for a in options if everyday is not None and not set(a.option_strings) & set(everyday)]
    for action in hidden:
        action.help = argparse.SUPPRESS  # still parsed, just not listed
    p.add_argument("--help-all", action="help", help=f"show all {len(options)} options and exit" if hidden
                   else argparse.SUPPRESS)  # main() turns it into --help of a parser that hides nothing
    p.epilog = f"--help-all shows all {len(options)} options." if hidden else None


# commands that run Prefect flows in this process: Prefect's logging is set up before anything imports torch
# (fbgemm's import-time logging.info() would install a plain root handler otherwise)
PREFECT_COMMANDS = {"run", "serve", "tune"}


def _prefect_logging(debug: bool) -> None:
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # Prefect's 20 s for the ephemeral server to start is too short on a busy machine
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    from prefect.logging.configuration import setup_logging

    from flows.errors import LOGGED

    setup_logging()
    if not debug:  # the terminal gets the one clean line below; the flow run's logs keep the message
        for handler in logging.getLogger().handlers:
            handler.addFilter(lambda record: not getattr(record, LOGGED, False) and not (
                record.exc_info and isinstance(record.exc_info[1], UserError)))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)
    debug = "--debug" in argv[:argv.index(command)] if command in argv else "--debug" in argv
    if command in PREFECT_COMMANDS:
        _prefect_logging(debug)
        from flows.ephemeral import server_dies_with_this_process

        server_dies_with_this_process()  # an ephemeral server this command starts ends with it, even on kill -9
    parser = build_parser(only=command if command in COMMANDS else None, help_all="--help-all" in argv)
    argv = ["--help" if a == "--help-all" else a for a in argv]
    at = argv.index(command) if command in argv else len(argv)
    sub = parser._subparsers._group_actions[0].choices[command] if command in COMMANDS else parser
    for owner, tokens in [(parser, argv[:at])] + ([(sub, argv[at + 1:])] if command in COMMANDS else []):
        if unknown := _unknown_options(owner, tokens):   # named before a missing required option is
            owner.error(owner.unknown(unknown[0]))
    args, extra = parser.parse_known_args(argv)
    if extra:
        sub.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "_run", None):
        parser.print_help()
        return 0 if not argv else 2
    try:
        with _owner_only(command):   # an ephemeral server it starts answers it (and its children) only
            return int(args._run(args) or 0)
    except UserError as e:
        if debug:
            traceback.print_exc()
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished work is kept; run the same command again to resume.", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `dlrmflow inspect D | head`: the reader left, nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:  # a store that cannot be used (lost or frozen S3, read-only): one line too
        from common.store_errors import store_error

        error = store_error(e, _store_option(args))
        if error is None:
            raise
        if debug:
            traceback.print_exc()
        print(f"error: {error}", file=sys.stderr)
        return 2


def _owner_only(command: str | None):
    """``flows.ephemeral.server_for_its_owner_only`` for a command that runs Prefect flows here, else nothing."""
    if command not in PREFECT_COMMANDS:
        return contextlib.nullcontext()
    from flows.ephemeral import server_for_its_owner_only

    return server_for_its_owner_only()


def _store_option(args: argparse.Namespace) -> str | None:
    """The store the command line names (``--store``), if it does: what a store error names."""
    for dest, value in vars(args).items():
        if dest.rpartition(":")[2] == "store" and isinstance(value, str):
            from common.store import Store

            try:
                return Store(value).uri
            except UserError:
                return None
    return None


if __name__ == "__main__":
    sys.exit(main())
