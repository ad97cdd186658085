"""The errors the pipeline raises on purpose. The CLI turns each into one `error:` line:
ConfigError and InputError (DataFault included) exit 2 (bad parameters or input),
ValidationFailed exits 1."""

from __future__ import annotations


class ConfigError(ValueError):
    """params.yaml is invalid; the message names the file and the key."""


class InputError(ValueError):
    """Bad user input: the message names the file, line or field and what was expected."""


class DataFault(InputError):
    """A file that opened cleanly is damaged where it was read later (a corpus line parsed when
    a search returns it); the message names the file and line. A server answers it with a 5xx,
    since the file is the server's own, not the client's."""


class ValidationFailed(RuntimeError):
    """A data-validation suite failed; the stage must stop the pipeline."""

    def __init__(self, where: str, failures: list[str]):
        self.failures = failures
        lines = "\n".join(f"  - {f}" for f in failures)
        super().__init__(f"{where}: validation failed ({len(failures)} problems)\n{lines}")
