"""Named models in the store: ``<store>/models/<name>/champion.json`` (the model in use) and ``history.jsonl``
(one line per pipeline run: date, window, challenger and champion metrics, decision)."""

from __future__ import annotations

import json
import posixpath
import re

import fsspec
from pydantic import BaseModel, ConfigDict, Field

from common.errors import UserError

CHAMPION_FILE = "champion.json"
HISTORY_FILE = "history.jsonl"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"


class Champion(BaseModel):
    """The model in use: a training run's checkpoint with the dataset (and so the vocabularies) it was trained on."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="The model's name (its folder under models/).")
    run: str = Field(description="URI of the training run folder.")
    step: int = Field(description="The checkpoint step of that run.")
    dataset: str = Field(description="URI of the dataset the run trained on (its vocab/ holds the vocabularies).")
    vocab: str = Field(description="URI of the dataset's vocabulary folder.")
    date: str = Field(description="The run's date (ISO), the day it was tested on.")
    window: list[str] = Field(default_factory=list, description="The dates it trained and validated on.")
    metrics: dict[str, float] = Field(default_factory=dict, description="auc and logloss on its test day.")
    promoted_at: str = Field(description="When it was promoted (ISO timestamp, UTC).")


def check_name(name: str) -> str:
    """``name`` when it can name a model folder, else a UserError saying how to fix it."""
    if not re.match(NAME_PATTERN, name):
        raise UserError(f"model name {name!r} cannot name a folder. Fix: use letters, digits, '.', '_' or '-' "
                        "(at most 64, starting with a letter or digit).")
    return name


def model_uri(store: str, name: str) -> str:
    """``<store>/models/<name>``."""
    return posixpath.join(store.rstrip("/"), "models", check_name(name))


def load_champion(model: str) -> Champion | None:
    """The champion of the model folder ``model`` (``<store>/models/<name>``), None when it has none yet."""
    fs, path = fsspec.core.url_to_fs(model)
    target = posixpath.join(path, CHAMPION_FILE)
    if not fs.exists(target):
        return None
    return Champion.model_validate(json.loads(fs.cat_file(target)))
