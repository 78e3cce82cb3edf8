"""The daily work without Prefect: the dated window, the model registry, the promotion decision and batch scoring
(the flows in ``flows/`` call them)."""
