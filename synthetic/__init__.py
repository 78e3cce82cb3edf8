"""Synthetic Criteo-format click logs with labels from a planted model (``generator``), their columns calibrated
on the real data (``columns``). Imports only ``feature_spec`` and ``common``."""
