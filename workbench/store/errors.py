"""What can go wrong in the trace store, as errors whose messages say why and what to do."""

from __future__ import annotations

from core.errors import InvalidInputError, WorkbenchError


class StoreError(WorkbenchError):
    """The trace store cannot do what was asked; the message says why and what to do."""


class StoreLockedError(StoreError):
    pass


class CorruptStoreError(StoreError):
    pass


class SchemaVersionError(StoreError):
    pass


class StoreUnavailableError(StoreError):
    pass


class RunNotFoundError(StoreError, InvalidInputError):
    pass


class CsvFormatError(InvalidInputError):
    pass
