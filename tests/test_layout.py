"""The house rules, read from the sources (ast): imports point only down (flows -> {nightly, tuning} -> models ->
{training, preprocessing} -> feature_spec -> common; synthetic -> feature_spec, common), Prefect only in flows/, a
flow body holds no decision (no ordering comparison in a @flow or @task function, no optuna in flows/), and the store's
top-level folders and the URI -> filesystem call spelled only in common/store.py; and the light tier (every
config.py, common/, training/rundir.py, models/registry.py) imports neither torch, TorchRec nor Prefect; other
packages import training and models through their faces, and every face declares its names under TYPE_CHECKING;
and common/errors.py's docstring lists every UserError subclass."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# what each package may import of this project (besides itself)
ALLOWED = {
    "common": set(),
    "feature_spec": {"common"},
    "preprocessing": {"feature_spec", "common"},
    "training": {"feature_spec", "common"},
    "synthetic": {"feature_spec", "common"},
    "models": {"training", "preprocessing", "feature_spec", "common"},
    "nightly": {"models", "training", "preprocessing", "feature_spec", "common"},
    "tuning": {"models", "training", "feature_spec", "common"},
    "flows": {"nightly", "models", "tuning", "training", "preprocessing", "synthetic", "feature_spec", "common"},
}
PREFECT = {"prefect", "prefect_dask"}
# a flow body holds no decision: the libraries that decide (Optuna samples, prunes and ranks trials) belong to the
# decision's owner (tuning.search), and a @flow or @task function compares no two values by order (a metric against
# a threshold, a step against a plan, a count against a limit): it branches on the owner's answers only
DECIDING = {"optuna"}
ORDERING = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
STORE_FOLDERS = {"datasets", "runs", "models", "tunes", "_files", "_work", "synthetic", "_trash", "specs"}
STORE_MODULE = "common/store.py"
# the light tier: what a command's options, a config file or a look at the store may import cheaply
HEAVY = ("torch", "torchrec", "fbgemm_gpu", "prefect")
LIGHT_NAMED = ("training/rundir.py", "models/registry.py")
FACED = ("training", "models")   # packages whose face (``_FACE`` in __init__) is all other packages import of them
# the suite's machinery (tests/helpers/warm_launcher.py, once training.launchers.warm), never named by the product
TEST_MACHINERY = ("warm_launcher", "launchers.warm", "DLRMFLOW_WARM_LAUNCHER")


def face(package: str) -> set[str]:
    """The names of ``package``'s face: the keys of the ``_FACE`` table in its __init__.py."""
    tree = ast.parse((REPO / package / "__init__.py").read_text())
    [table] = [node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
               and any(getattr(t, "id", None) == "_FACE" for t in node.targets)]
    return set(ast.literal_eval(table))


def modules() -> list[tuple[str, Path]]:
    return [(package, path) for package in ALLOWED for path in sorted((REPO / package).rglob("*.py"))]


def light_modules() -> list[str]:
    """The light tier's modules (dotted names): every config.py, common/*, and those named in LIGHT_NAMED."""
    paths = {p for package in ALLOWED for p in (REPO / package).rglob("config.py")}
    paths |= set((REPO / "common").glob("*.py")) | {REPO / rel for rel in LIGHT_NAMED}
    names = [".".join(p.relative_to(REPO).with_suffix("").parts) for p in paths]
    return sorted(name.removesuffix(".__init__") for name in names)


def heavy_imports(names: list[str], path: str | None = None) -> dict[str, list[str]]:
    """Module -> the HEAVY modules a fresh interpreter had imported after it (first seen there), importing
    ``names`` in order (``path``: a folder put first on sys.path)."""
    code = ("import importlib, json, sys\n"
            f"heavy, found = {HEAVY!r}, {{}}\n"
            f"for name in {names!r}:\n"
            "    importlib.import_module(name)\n"
            "    new = [m for m in heavy if m in sys.modules and m not in sum(found.values(), [])]\n"
            "    if new:\n"
            "        found[name] = new\n"
            "print(json.dumps(found))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [path, str(REPO)])))
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def imported(tree: ast.AST, package: str) -> set[str]:
    """The top-level names of the modules a module imports (relative imports: its own package)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add(package if node.level else node.module.split(".")[0])
    return names


def folder_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, text) of the string literals (docstrings and text with spaces aside) that hold a store folder name
    as a path component: "runs", f"{root}/runs/{name}", "s3://b/models/x"."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                and not any(ch.isspace() for ch in node.value) and STORE_FOLDERS & set(node.value.split("/")):
            found.append((node.lineno, node.value))
    return found


def check(sources: dict[str, tuple[str, str]]) -> list[str]:
    """Every violation of the house rules in ``sources`` (relative path -> (package, text))."""
    problems = []
    for rel, (package, text) in sources.items():
        tree = ast.parse(text, rel)
        names = imported(tree, package)
        for name in sorted(names & (set(ALLOWED) - ALLOWED[package] - {package})):
            problems.append(f"{rel}: imports {name} ({package} may import {sorted(ALLOWED[package]) or 'none'})")
        if package != "flows":
            problems += [f"{rel}: imports {name} (Prefect only in flows/)" for name in sorted(names & PREFECT)]
        else:
            problems += [f"{rel}: imports {name} (a flow body holds no decision: call its owner)"
                         for name in sorted(names & DECIDING)]
            problems += _flow_decisions(rel, tree)
        problems += _face_problems(rel, package, tree)
        problems += _face_declarations(rel, tree)
        problems += _command_imports(rel, text, tree)
        problems += _test_machinery(rel, tree)
        if rel != STORE_MODULE:
            problems += [f"{rel}:{line}: store folder literal {text!r} (name it by common.store's constant)"
                         for line, text in folder_literals(tree)]
            problems += [f"{rel}:{node.lineno}: url_to_fs (use common.store.filesystem)" for node in ast.walk(tree)
                         if isinstance(node, ast.Attribute) and node.attr == "url_to_fs"]
            problems += [f"{rel}:{node.lineno}: fsspec.open (use common.store.open_uri)" for node in ast.walk(tree)
                         if isinstance(node, ast.Attribute) and node.attr in ("open", "open_files")
                         and isinstance(node.value, ast.Name) and node.value.id == "fsspec"]
    return problems


def _flow_decisions(rel: str, tree: ast.AST) -> list[str]:
    """The ordering comparisons in the bodies of a flows/ module's @flow and @task functions (``flow``,
    ``flow(...)``, ``prefect.flow``...): decisions that belong to the package that owns the job."""
    def named(decorator: ast.expr) -> str | None:
        decorator = decorator.func if isinstance(decorator, ast.Call) else decorator
        return decorator.attr if isinstance(decorator, ast.Attribute) else getattr(decorator, "id", None)

    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and {"flow", "task"} & set(
                map(named, node.decorator_list)):
            out += [f"{rel}:{n.lineno}: {node.name} decides `{ast.unparse(n)}` (a flow body holds no decision: "
                    "move it to the package that owns the job)" for n in ast.walk(node)
                    if isinstance(n, ast.Compare) and any(isinstance(op, ORDERING) for op in n.ops)]
    return out


def _test_machinery(rel: str, tree: ast.AST) -> list[str]:
    """The product naming the suite's machinery (tests/helpers/: the warm launcher) outside its docstrings: it has
    one seam for how its processes start, ``common.process.launch_command`` (``$DLRMFLOW_LAUNCH_PREFIX``)."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            out += [f"{rel}:{node.lineno}: names the test machinery {word!r} (the product's one seam is "
                    "common.process.launch_command)" for word in TEST_MACHINERY if word in node.value]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            out += [f"{rel}:{node.lineno}: imports {name} (test machinery stays in tests/)" for name in names
                    if name.split(".")[0] == "helpers" or any(word in name for word in TEST_MACHINERY)]
    return out


def _command_imports(rel: str, text: str, tree: ast.AST) -> list[str]:
    """A command module (flows/commands/) imports our modules at its top; one imported in a function (what costs torch
    or Prefect, kept out of the command's ``--help``) says why in a comment, on its line or above its block."""
    if not rel.startswith("flows/commands/"):
        return []
    lines = text.splitlines()
    out = []
    for function in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        for node in (n for n in ast.walk(function) if isinstance(n, (ast.Import, ast.ImportFrom))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if not getattr(node, "level", 0) and not {name.split(".")[0] for name in names} & set(ALLOWED):
                continue
            above = node.lineno - 2
            while above >= 0 and lines[above].lstrip().startswith(("from ", "import ")):
                above -= 1
            if "#" not in lines[node.lineno - 1] and not (above >= 0 and lines[above].lstrip().startswith("#")):
                out.append(f"{rel}:{node.lineno}: `{ast.unparse(node)}` in {function.name}() (a command imports our "
                           "modules at its top; one that costs torch or Prefect says so in a comment)")
    return out


def _face_declarations(rel: str, tree: ast.AST) -> list[str]:
    """A face (an __init__.py with a ``_FACE`` table) that does not declare each name of the table under ``if
    TYPE_CHECKING:`` as an import from the module the table names (``from .config import X``; a module: ``from .
    import registry``), or declares more: type checkers and IDEs see the declarations, the program the table."""
    tables = [node.value for node in tree.body if isinstance(node, ast.Assign)
              and any(getattr(t, "id", None) == "_FACE" for t in node.targets)]
    if not rel.endswith("__init__.py") or not tables:
        return []
    table = ast.literal_eval(tables[0])
    declared = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for imp in (n for n in node.body if isinstance(n, ast.ImportFrom) and n.level == 1):
                declared |= {a.asname or a.name: imp.module or a.name for a in imp.names}
    out = [f"{rel}: {name} of _FACE is not declared under `if TYPE_CHECKING:` (add `from .{module} import {name}`)"
           if name not in declared else
           f"{rel}: {name} is declared from .{declared[name]} under `if TYPE_CHECKING:`, _FACE has it from .{module}"
           for name, module in sorted(table.items()) if declared.get(name) != module]
    return out + [f"{rel}: {name} is declared under `if TYPE_CHECKING:` but not in _FACE"
                  for name in sorted(declared.keys() - table.keys())]


def _face_problems(rel: str, package: str, tree: ast.AST) -> list[str]:
    """Imports of a faced package's modules, or of names its face lacks, from another package."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            hits = [a.name for a in node.names if a.name.split(".")[0] in set(FACED) & ALLOWED[package]]
            out += [f"{rel}:{node.lineno}: import {name} (import from the face of {name.split('.')[0]})"
                    for name in hits]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            top = node.module.split(".")[0]
            if top not in set(FACED) & ALLOWED[package]:
                continue
            if node.module != top:
                out.append(f"{rel}:{node.lineno}: from {node.module} import ... (import from the face of {top}: "
                           f"from {top} import NAME)")
            else:
                out += [f"{rel}:{node.lineno}: {a.name} is not in the face of {top} ({top}/__init__.py _FACE)"
                        for a in node.names if a.name not in face(top)]
    return out


def test_the_house_rules_hold():
    sources = {path.relative_to(REPO).as_posix(): (package, path.read_text()) for package, path in modules()}
    assert len(sources) > 90   # every package was read
    assert check(sources) == []


def test_the_light_tier_imports_no_torch_torchrec_or_prefect():
    names = light_modules()
    assert {"common.store", "training.config", "training.rundir", "models.registry", "flows.config",
            "training.launchers.config"} <= set(names)
    assert heavy_imports(names) == {}


def test_a_heavy_import_is_found(tmp_path):
    (tmp_path / "pulls_prefect.py").write_text("import sys, types\nsys.modules['prefect'] = types.ModuleType('prefect')\n")
    assert heavy_imports(["common.errors", "pulls_prefect", "common.store"], str(tmp_path)) == {
        "pulls_prefect": ["prefect"]}


@pytest.mark.parametrize("rel, package, text, expected", [
    ("training/x.py", "training", "from preprocessing.apply import encode_inputs\n", "imports preprocessing"),
    ("common/x.py", "common", "import training.rundir\n", "imports training"),
    ("synthetic/x.py", "synthetic", "from nightly import window\n", "imports nightly"),
    ("models/x.py", "models", "from nightly import window\n", "imports nightly"),
    ("nightly/x.py", "nightly", "from flows import artifacts\n", "imports flows"),
    ("feature_spec/x.py", "feature_spec", "from prefect import flow\n", "imports prefect"),
    ("nightly/x.py", "nightly", "import prefect_dask\n", "imports prefect_dask"),
    ("flows/x.py", "flows", 'RUNS = "runs"\n', "store folder literal 'runs'"),
    ("preprocessing/x.py", "preprocessing", 'def f(root):\n    return f"{root}/_work/{key}"\n', "'/_work/'"),
    ("training/x.py", "training", "import fsspec\nfs = fsspec.core.url_to_fs('x')\n", "url_to_fs"),
    ("preprocessing/x.py", "preprocessing", "import fsspec\nf = fsspec.open('s3://b/x', 'rb')\n", "fsspec.open"),
    ("flows/x.py", "flows", "from training.config import TrainConfig\n", "import from the face of training"),
    ("nightly/x.py", "nightly", "from models import not_a_name\n", "not_a_name is not in the face of models"),
    ("flows/x.py", "flows", "import models.registry\n", "import from the face of models"),
    ("training/x.py", "training", "from helpers import warm_launcher\n", "imports helpers (test machinery"),
    ("training/x.py", "training", 'cmd = ["-m", "training.launchers.warm"]\n', "test machinery 'launchers.warm'"),
    ("tuning/x.py", "tuning", "from nightly import night\n", "imports nightly"),
    ("flows/x.py", "flows", "from optuna.trial import TrialState\n", "imports optuna (a flow body holds no decision"),
    ("flows/commands/x.py", "flows", "def run(args):\n    from training import RunDir\n", "`from training import "
     "RunDir` in run() (a command imports our modules at its top"),
    ("models/__init__.py", "models", "if TYPE_CHECKING:\n    from .config import GcConfig\n"
     "_FACE = {'GcConfig': 'config', 'ScoreConfig': 'config'}\n", "ScoreConfig of _FACE is not declared"),
    ("models/__init__.py", "models", "if TYPE_CHECKING:\n    from .decision import GcConfig\n"
     "_FACE = {'GcConfig': 'config'}\n", "GcConfig is declared from .decision"),
    ("models/__init__.py", "models", "if TYPE_CHECKING:\n    from . import gc\n    from .config import Extra\n"
     "_FACE = {'gc': 'gc'}\n", "Extra is declared under `if TYPE_CHECKING:` but not in _FACE"),
    ("flows/x.py", "flows", "@flow(name='n')\ndef n(m):\n    if m['auc'] > 0.7:\n        promote()\n",
     "n decides `m['auc'] > 0.7`"),
    ("flows/x.py", "flows", "@prefect.task\ndef t(run, plan):\n    return run.steps() < plan\n",
     "t decides `run.steps() < plan`"),
])
def test_a_violation_is_found(rel, package, text, expected):
    problems = check({rel: (package, text)})
    assert len(problems) == 1 and expected in problems[0], problems


def user_errors(sources: dict[str, str]) -> set[str]:
    """The dotted names (``package.module.Class``) of the subclasses of UserError, at any depth, defined in
    ``sources`` (relative path -> text); a base is known by its last name (``UserError``, ``errors.UserError``)."""
    classes = []
    for rel, text in sources.items():
        module = ".".join(Path(rel).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(text, rel)):
            if isinstance(node, ast.ClassDef):
                bases = {b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases}
                classes.append((node.name, bases, module))
    found, names = set(), {"UserError"}
    while True:
        new = {(name, module) for name, bases, module in classes if bases & names} - found
        if not new:
            return {f"{module}.{name}" for name, module in found}
        found |= new
        names |= {name for name, _ in new}


def listed_user_errors(docstring: str) -> set[str]:
    """The subclasses common/errors.py's docstring lists: its lines ``- ``package.module.Class``: ...``."""
    return set(re.findall(r"^- ``([\w.]+)``", docstring, re.M))


def test_common_errors_lists_every_user_error():
    sources = {path.relative_to(REPO).as_posix(): path.read_text() for _, path in modules()}
    found = user_errors(sources)
    assert {"feature_spec.errors.SpecError", "training.launchers.base.LaunchError"} <= found   # the walk works
    listed = listed_user_errors(ast.get_docstring(ast.parse(sources["common/errors.py"])))
    assert found - listed == set(), "UserError subclasses that common/errors.py's docstring does not list"
    assert listed - found == set(), "common/errors.py's docstring lists classes that are not UserError subclasses"


def test_user_errors_are_found_at_any_depth():
    sources = {"common/errors.py": "class UserError(Exception):\n    pass\n",
               "preprocessing/errors.py": "from common.errors import UserError\n"
                                          "class InputError(UserError):\n    pass\n",
               "nightly/__init__.py": "from preprocessing import errors\nclass Late(errors.InputError):\n    pass\n"
                                      "class Other(ValueError):\n    pass\n"}
    assert user_errors(sources) == {"preprocessing.errors.InputError", "nightly.Late"}
    assert listed_user_errors("Subclasses:\n\n- ``preprocessing.errors.InputError``: x\n  ``nightly.Late``\n") == {
        "preprocessing.errors.InputError"}


def test_a_flow_branches_on_its_owners_answers_and_a_helper_is_not_held_to_it():
    """What the flow-body check leaves to review: a branch on an answer, an equality, a comparison outside a flow."""
    text = ("@flow\ndef n(plan, gate):\n    if plan.model and gate.mode == 'warn':\n        compete()\n"
            "def _slots(n):\n    return n < 3\n")
    assert check({"flows/x.py": ("flows", text)}) == []
    assert check({"tuning/x.py": ("tuning", "import optuna\nfrom models import registry\n")}) == []


def test_a_command_may_import_what_costs_torch_in_a_function_saying_why():
    text = ("import sys\nfrom training import RunDir\n\ndef run(args):\n    import json\n"
            "    # heavy: Prefect\n    from flows.pipeline import pipeline\n    from tuning.search import prepare\n"
            "\n    from flows.tune import tune   # heavy: Prefect\n")
    assert check({"flows/commands/x.py": ("flows", text)}) == []
    assert check({"flows/x.py": ("flows", "def f():\n    from training import RunDir\n")}) == []


def test_docstrings_and_messages_may_name_the_folders():
    text = '"""Runs go to ``<store>/runs/``."""\nERROR = "pass --model STORE/models/NAME"\n'
    assert check({"flows/x.py": ("flows", text)}) == []
