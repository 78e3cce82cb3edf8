"""The synthetic Criteo generator: rows with a planted model and a known best AUC, drifting dated days,
multi-hot lists (``generator``); the columns calibrated on real Criteo rows (``columns``)."""
