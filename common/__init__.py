"""What every package shares and nothing else: the user-error type and atomic writes.

Imports no other package of this project (the bottom of the dependency graph)."""
