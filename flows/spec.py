"""The `spec-draft` flow: `dlrmflow spec draft` from the UI. Its form takes the data's URIs (and the label rule, the
rows to sample); the draft (``preprocessing.draft``) is kept in the store as ``specs/NAME.yaml`` with a version
(``preprocessing.specs``: a different spec under the same name is replaced only with ``overwrite``), and shown as
a markdown artifact (a table of the columns, the YAML). The preprocess and pipeline forms then take
``spec: store:NAME``."""

from __future__ import annotations

from prefect import flow, get_run_logger

from common.store import Store
from flows import artifacts
from flows.errors import user_errors
from preprocessing.config import SpecDraftConfig


@flow(name="spec-draft", log_prints=True)
@user_errors
def spec_draft(config: SpecDraftConfig) -> str:
    """Draft an input spec from a sample of the data and keep it in the store as specs/NAME.yaml; returns its URI.

    Args:
        config: The data, the store, the spec's name, the label (a column or a rule) and the rows to sample.
    """
    from preprocessing.draft import draft
    from preprocessing.specs import save_spec

    store = Store(config.store)
    drafted = draft(config.inputs, config.label, config.rows, config.name)
    saved = save_spec(store, drafted.name, drafted.text, config.overwrite)
    get_run_logger().info("spec %s: %s (version %d%s); use it as spec: store:%s", drafted.name, saved.uri,
                          saved.version, "" if saved.changed else ", unchanged", drafted.name)
    artifacts.spec_draft(drafted, saved)
    return saved.uri
