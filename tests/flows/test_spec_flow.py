"""The spec-draft flow (the UI's `dlrmflow spec draft`): the draft kept in the store as specs/NAME.yaml with its
version and shown as an artifact; a different draft under the same name refused; the preprocess flow taking it as
``store:NAME``, and refusing a pasted spec with problems before any work, each problem on its line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

import feature_spec as fspec
from flows import artifacts
from flows.preprocess import preprocess
from flows.spec import spec_draft
from helpers.prefect_api import latest_artifacts
from preprocessing.config import FlowPreprocessConfig, SpecDraftConfig


def _csv(path: Path, seed: int, cities: list[str]) -> str:
    rng = np.random.default_rng(seed)
    pl.DataFrame({"clicked": rng.integers(0, 2, 400), "price": rng.exponential(50, 400).round(2),
                  "city": rng.choice(cities, 400), "tags": rng.choice(["a|b", "b", "c|a|d"], 400)}).write_csv(path)
    return str(path)


def test_a_draft_is_kept_in_the_store_shown_and_used_by_name(prefect_harness, tmp_path):
    store = tmp_path / "store"
    data = _csv(tmp_path / "ads.csv", 0, ["paris", "berlin", "rome"])
    uri = spec_draft(SpecDraftConfig(inputs=[data], store=str(store), name="ads"))
    assert uri == str(store / "specs" / "ads.yaml")
    text = (store / "specs" / "ads.yaml").read_text()
    assert (store / "specs" / "ads" / "v1.yaml").read_text() == text and "  tags: {dtype: str, hotness" in text

    shown = latest_artifacts()[artifacts.SPEC_DRAFT]
    assert shown.startswith("### Input spec `ads`: version 1\n") and "`spec: store:ads`" in shown
    assert "| column | kind | cardinality | threshold | share kept | reason |" in shown
    assert "| city | categorical | 3 | 10 | 100% | text; 3 distinct" in shown
    assert "| tags | categorical list | 4 |" in shown and "| price | numerical (log1p) |  |  |  | float" in shown
    assert f"```yaml\n{text}```" in shown

    other = _csv(tmp_path / "ads2.csv", 1, ["oslo", "lima"])   # other data, the same name
    state = spec_draft(SpecDraftConfig(inputs=[other], store=str(store), name="ads"), return_state=True)
    assert state.is_failed() and "specs/ads.yaml holds a different spec (version 1" in state.message
    assert (store / "specs" / "ads.yaml").read_text() == text and not (store / "specs" / "ads" / "v2.yaml").exists()

    dataset = preprocess(FlowPreprocessConfig(inputs=[data], out=str(store), spec="store:ads", workers=1,
                                              progress=False))
    spec = fspec.load(dataset)
    assert spec.metadata["preprocessing"]["spec"] == str(store / "specs" / "ads" / "v1.yaml")
    assert spec.feature_spec["tags"].multi_valued and spec.feature_spec["city"].cardinality == 4   # 3 cities + 0

    pasted = text.replace("{dtype: str, frequency", "{dtyp: str, frequency").replace("[clicked]", "[click]")
    state = preprocess(FlowPreprocessConfig(inputs=[data], out=str(tmp_path / "other"), spec=pasted, workers=1,
                                            progress=False), return_state=True)
    lines = state.message.splitlines()
    assert state.is_failed() and lines[0] == "the pasted spec has 3 problem(s); nothing was preprocessed:", lines
    assert lines[1].startswith("  line 4: feature_spec.clicked: is in no channel")   # by line, each with its fix
    assert lines[2].startswith("  line 6: feature_spec.city.dtyp: unknown key 'dtyp' (did you mean 'dtype'?)")
    assert lines[3].startswith("  line 8: channel_spec.click: ") and all(" Fix: " in line for line in lines[1:])
    assert not (tmp_path / "other").exists()
