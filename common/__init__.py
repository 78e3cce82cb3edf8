"""What every package shares and nothing else: the user-error type, config overrides, atomic writes, prefetching,
the store's layout and filesystems (``store``), leases, the classification metrics and a figure's PNG bytes
(``png``, for the plot modules). Imports no other package of this project (the bottom of the dependency graph)."""
