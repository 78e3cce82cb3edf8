"""What every package shares and nothing else: the user-error type, config overrides, atomic writes, prefetching,
the store's layout and filesystems (``store``), leases and the classification metrics. Imports no other package
of this project (the bottom of the dependency graph)."""
