"""The feature spec's error: it names the file, section and feature, and how to fix it."""

from __future__ import annotations

from common.errors import UserError


class SpecError(UserError, ValueError):
    """A feature spec that cannot be used.

    The message names the file (when known), the section, the feature and the fix, e.g.
    ``spec.yaml: feature_spec.C3: hash_buckets must be >= 2 (got 1). Fix: ...``.
    """

    def __init__(self, problem: str, *, section: str | None = None, feature: str | None = None,
                 fix: str | None = None, path: str | None = None):
        self.problem, self.section, self.feature, self.fix, self.path = problem, section, feature, fix, path
        super().__init__(self._format())

    def _format(self) -> str:
        where = ".".join(p for p in (self.section, self.feature) if p)
        head = ": ".join(p for p in (self.path, where) if p)
        msg = f"{head}: {self.problem}" if head else self.problem
        if self.fix:
            msg += f" Fix: {self.fix}"
        return msg

    def with_path(self, path: str) -> "SpecError":
        """The same error, naming the spec file it came from."""
        return SpecError(self.problem, section=self.section, feature=self.feature, fix=self.fix, path=path)
