"""`dlrmflow spec check`'s spec half: every problem of a spec YAML at once, each with its line and a fix.

Loading a spec (``io.load``) stops at the first problem; this lists them all: the YAML itself, every value of a
wrong type (pydantic's errors), every key that would be ignored (``model.key_problems``) and the first problem of
each cross-section rule. Line numbers come from the YAML's node tree (composed here; an alias is never followed,
so nested aliases cost nothing), never from the loaded data, which ``common.config.load_yaml`` reads (refusing
aliases that repeat too much: one problem).
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml
from pydantic import ValidationError

from common.config import load_yaml
from common.errors import UserError
from common.store import read_text

from .errors import SpecError
from .io import spec_uri
from .model import Feature, FeatureSpec, close_match, cross_problems, key_problems

SECTIONS = ("feature_spec", "source_spec", "channel_spec", "metadata")
_KEYS = set(Feature.model_fields) | {"type", "features", "files"}
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Problem:
    """One problem: where (dotted keys), its 1-based line in the YAML (None: not in the file), what, and the fix."""

    where: str
    line: int | None
    problem: str
    fix: str

    def __str__(self) -> str:
        at = f"line {self.line}: " if self.line else ""
        return f"{at}{self.where + ': ' if self.where else ''}{self.problem} Fix: {self.fix}"


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """(key, key, ...) -> 1-based line of each mapping key and sequence item of a YAML text ({} when it does not
    parse). An alias is not followed (its node was met before), so a small text never stands for a large tree."""
    try:
        root = yaml.compose(text, Loader=_LOADER)
    except yaml.YAMLError:
        return {}
    lines: dict[tuple[str, ...], int] = {}
    seen: set[int] = set()
    todo = [((), root)]
    while todo:
        path, node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                sub = (*path, str(key.value))
                lines.setdefault(sub, key.start_mark.line + 1)
                todo.append((sub, value))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                sub = (*path, str(i))
                lines.setdefault(sub, item.start_mark.line + 1)
                todo.append((sub, item))
    return lines


def line_of(lines: dict[tuple[str, ...], int], path: tuple) -> int | None:
    """The line of ``path``, else of its longest prefix in the file."""
    path = tuple(str(p) for p in path)
    for n in range(len(path), 0, -1):
        if path[:n] in lines:
            return lines[path[:n]]
    return None


def check_text(text: str, source: str = "spec") -> tuple[FeatureSpec | None, list[Problem]]:
    """The spec of a YAML text (None where it cannot be built or breaks a cross-section rule: nothing to check data
    against) and every problem found in it, by line."""
    try:
        data = load_yaml(text, source)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        return None, [Problem("", mark.line + 1 if mark else None, f"is not valid YAML: {getattr(e, 'problem', e)}.",
                              "correct the YAML syntax there.")]
    except UserError as e:   # aliases that repeat too much: the reader's one line names the line already
        return None, [Problem("", None, str(e), "write the value out in full.")]
    lines = key_lines(text)
    if not isinstance(data, dict):
        return None, [Problem("", 1, "is not a mapping with the sections feature_spec, source_spec, channel_spec, "
                              "metadata.", "see docs/spec.md for the shape of a spec.")]
    problems = []
    for section in data:
        if section not in SECTIONS:
            near = close_match(section, SECTIONS)
            problems.append(Problem(str(section), line_of(lines, (section,)), "unknown section" + (
                f" (did you mean '{near}'?)." if near else "."), f"a spec has only {', '.join(SECTIONS)}."))
    for section in ("feature_spec", "channel_spec"):
        if section not in data and not any(p.problem.endswith(f"'{section}'?).") for p in problems):
            problems.append(Problem(section, None, "section is missing.",
                                    "a spec needs feature_spec (name -> options) and channel_spec "
                                    "(label/numerical/categorical -> names)."))
    if problems:
        return None, problems
    data = {**data, "source_spec": data.get("source_spec") or {}, "metadata": data.get("metadata") or {}}
    typed = False   # a value of a wrong type was found (and left out: the spec built is not the file's)
    for _ in range(3):   # values of a wrong type are left out, so that the keys and rules are checked too
        try:
            spec = FeatureSpec.model_validate(data)
            break
        except ValidationError as e:
            found, typed = _from_pydantic(e.errors(), lines), True
            problems += found
            data = _without(data, [tuple(p.where.split(".")) for p in found])
    else:
        return None, problems
    problems += [Problem(".".join(path), line_of(lines, path), problem, fix)
                for path, problem, fix in key_problems(spec)]
    flagged = {p.where for p in problems}
    crossed = cross_problems(spec)
    for e in crossed:
        where = ".".join(p for p in (e.section, e.feature) if p)
        if where not in flagged:
            problems.append(Problem(where, line_of(lines, tuple(p for p in (e.section, e.feature) if p)),
                                    e.problem, e.fix or ""))
    return (None if crossed or typed else spec), sorted(problems, key=lambda p: (p.line is None, p.line or 0))


def _without(data: dict, paths: list[tuple]) -> dict:
    """A copy of ``data`` without the values at ``paths`` (a wrong value's key removed, once it is reported)."""
    import copy
    data = copy.deepcopy(data)
    for path in paths:
        node = data
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else node[int(key)] \
                if isinstance(node, list) and key.isdigit() and int(key) < len(node) else None
            if node is None:
                break
        if isinstance(node, dict):
            node.pop(path[-1], None)
        elif isinstance(node, list) and path[-1].isdigit() and int(path[-1]) < len(node):
            node.pop(int(path[-1]))
    return data


def _from_pydantic(errors: list[dict], lines: dict) -> list[Problem]:
    """One problem per value of a wrong type (a union's members each give pydantic an error: said as one)."""
    found: dict[tuple, list] = {}
    for err in errors:
        loc = tuple(str(x) for x in err["loc"])
        while len(loc) > 1 and loc not in lines and loc[:-1] in lines and loc[-1] not in _KEYS:
            loc = loc[:-1]   # a union member's name (`int`, `literal['variable']`): the key is the one before
        found.setdefault(loc, [err.get("input")])
        if err["msg"] not in found[loc]:
            found[loc].append(err["msg"])
    return [Problem(".".join(loc), line_of(lines, loc), f"{' or '.join(m[1:])} (got {m[0]!r}).",
                    "correct the value (docs/spec.md lists each key's values).") for loc, m in found.items()]


def check_spec(uri: str) -> tuple[FeatureSpec | None, list[Problem]]:
    """``check_text`` of the spec at ``uri`` (a YAML path or URI, or a dataset folder)."""
    path = spec_uri(uri)
    try:
        text = read_text(path)
    except FileNotFoundError:
        raise SpecError(f"feature spec '{path}' does not exist.", fix="pass the path of a spec YAML.") from None
    return check_text(text, path)
