"""What the tests share: data paths, dataset writers, process and Prefect helpers, fixtures (registered by
tests/conftest.py) and the rule that marks a test slow (helpers/slow.py). Test modules import from here, never
from each other."""
