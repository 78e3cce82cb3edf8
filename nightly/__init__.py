"""The recurring (nightly) runs without Prefect: dated windows, the model registry, the promotion rule and
batch scoring with a model's own vocabulary. The flows in ``flows/`` call these."""
