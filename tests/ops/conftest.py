# every test here runs lazily and eagerly
from tests.modes import execution_mode  # noqa: F401
