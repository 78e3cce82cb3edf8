"""The house rules, read from the sources (ast): imports point only down (flows -> nightly -> {training,
preprocessing} -> feature_spec -> common; synthetic -> feature_spec, common), Prefect only in flows/, and the store's
top-level folders and the URI -> filesystem call spelled only in common/store.py."""

from __future__ import annotations

import ast
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
    "nightly": {"training", "preprocessing", "feature_spec", "common"},
    "tuning": {"training", "feature_spec", "common"},
    "flows": {"nightly", "tuning", "training", "preprocessing", "synthetic", "feature_spec", "common"},
}
PREFECT = {"prefect", "prefect_dask"}
STORE_FOLDERS = {"datasets", "runs", "models", "tunes", "_files", "_work", "synthetic", "_trash"}
STORE_MODULE = "common/store.py"


def modules() -> list[tuple[str, Path]]:
    return [(package, path) for package in ALLOWED for path in sorted((REPO / package).rglob("*.py"))]


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
        if rel != STORE_MODULE:
            problems += [f"{rel}:{line}: store folder literal {text!r} (name it by common.store's constant)"
                         for line, text in folder_literals(tree)]
            problems += [f"{rel}:{node.lineno}: url_to_fs (use common.store.filesystem)" for node in ast.walk(tree)
                         if isinstance(node, ast.Attribute) and node.attr == "url_to_fs"]
    return problems


def test_the_house_rules_hold():
    sources = {path.relative_to(REPO).as_posix(): (package, path.read_text()) for package, path in modules()}
    assert len(sources) > 90   # every package was read
    assert check(sources) == []


@pytest.mark.parametrize("rel, package, text, expected", [
    ("training/x.py", "training", "from preprocessing.apply import encode_inputs\n", "imports preprocessing"),
    ("common/x.py", "common", "import training.rundir\n", "imports training"),
    ("synthetic/x.py", "synthetic", "from nightly import registry\n", "imports nightly"),
    ("nightly/x.py", "nightly", "from flows import artifacts\n", "imports flows"),
    ("feature_spec/x.py", "feature_spec", "from prefect import flow\n", "imports prefect"),
    ("nightly/x.py", "nightly", "import prefect_dask\n", "imports prefect_dask"),
    ("flows/x.py", "flows", 'RUNS = "runs"\n', "store folder literal 'runs'"),
    ("preprocessing/x.py", "preprocessing", 'def f(root):\n    return f"{root}/_work/{key}"\n', "'/_work/'"),
    ("training/x.py", "training", "import fsspec\nfs = fsspec.core.url_to_fs('x')\n", "url_to_fs"),
])
def test_a_violation_is_found(rel, package, text, expected):
    problems = check({rel: (package, text)})
    assert len(problems) == 1 and expected in problems[0], problems


def test_docstrings_and_messages_may_name_the_folders():
    text = '"""Runs go to ``<store>/runs/``."""\nERROR = "pass --model STORE/models/NAME"\n'
    assert check({"flows/x.py": ("flows", text)}) == []
