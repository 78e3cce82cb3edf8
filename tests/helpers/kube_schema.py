"""Kubernetes objects checked against the Kubernetes OpenAPI schema of one pinned version (no API server can run
here): kubernetes-validate's JSON schemas, strict (a field the API does not know is an error, as
``kubectl apply --validate=strict`` makes it). ``check_object(obj, where)`` fails the test naming the field."""

from __future__ import annotations

import functools

import kubernetes_validate
from kubernetes_validate import utils

KUBERNETES_VERSION = "1.33"
"""The schemas' Kubernetes version: that of the kubectl the images ship (KUBECTL_VERSION in infra/docker/)."""

# validate() reads the schema files (1.3 MB of definitions) for every object: once per process is enough
utils.schema_contents = functools.lru_cache(maxsize=None)(utils.schema_contents)


def check_object(obj: dict, where: str) -> None:
    """``obj`` (one Kubernetes object) is valid for ``KUBERNETES_VERSION``; else an AssertionError naming ``where``,
    the object and the field."""
    name = f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}"
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        field = ".".join(str(p) for p in e.path) or "(top level)"
        raise AssertionError(f"{where}: {name} is not a valid Kubernetes {KUBERNETES_VERSION} object: "
                             f"{field}: {e.message}") from None
    except kubernetes_validate.SchemaNotFoundError as e:
        raise AssertionError(f"{where}: {name}: {e.message}") from None
