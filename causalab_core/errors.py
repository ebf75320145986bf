"""The errors a user sees: each is one line, and each carries its exit code."""

from __future__ import annotations


class CausalabError(Exception):
    """Base of every error causalab reports as a one-line message."""

    exit_code = 1

    def one_line(self) -> str:
        text = " ".join(str(self).split())
        return f"{type(self).__name__}: {text}"


class DocumentError(CausalabError):
    """The document is not valid: bad JSON, wrong type, unknown key or name, missing file."""

    exit_code = 2


class PluginError(CausalabError):
    """A plugin is missing, duplicated, or broke its contract."""

    exit_code = 2


class PlanError(CausalabError):
    """A valid document that cannot be planned (or run) against this model and data."""

    exit_code = 1


class EngineError(CausalabError):
    """An engine refused or failed to run a plan."""

    exit_code = 1


class OutputError(CausalabError):
    """The output folder cannot be written as asked (it exists, or is not writable)."""

    exit_code = 2
