"""Errors a user can act on: each message says what is wrong and what to do."""


class WorkbenchError(Exception):
    """Base class for errors caused by input, configuration or environment (not by a bug)."""


class InvalidInputError(WorkbenchError, ValueError):
    """A prompt, parameter or method that cannot be used as given."""
