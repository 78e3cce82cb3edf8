"""The model layer without Prefect: named models in the store (``registry``: champion.json, history.jsonl,
bundles), the promotion rule and its gates (``decision``), batch scoring and export with a model's own vocabulary
(``scoring``), the store's clean-up (``gc``), a model's pictures (``plots``) and their configs (``config``).
``nightly`` and the flows call these."""
