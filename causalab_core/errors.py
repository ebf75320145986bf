"""The errors a user sees: each is one line, and each carries its exit code."""

from __future__ import annotations

import re

ECHO_LIMIT = 200


def shorten(text: str, limit: int = ECHO_LIMIT) -> str:
    """``text`` cut to about ``limit`` characters, saying how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def echo(value: object) -> str:
    """A user's value as a message quotes it: its repr, cut to about 200 characters."""
    try:
        return shorten(repr(value))
    except RecursionError:
        return f"<a {type(value).__name__} nested too deep to show>"


def clip(text: str, limit: int = 400, word: int = ECHO_LIMIT) -> str:
    """A message someone else wrote (a plugin's, pydantic's), which may quote a user's value whole:
    each run of more than ``word`` non-space characters cut, then the whole to ``limit``."""
    return shorten(re.sub(rf"\S{{{word + 1},}}", lambda m: shorten(m.group(), word), text), limit)


class CausalabError(Exception):
    """Base of every error causalab reports as a one-line message."""

    exit_code = 1

    def one_line(self) -> str:
        """The message as the command line prints it: the error's name and one line of text."""
        # Every user value a message quotes goes through `echo`; this is the backstop for any that does not.
        text = clip(" ".join(str(self).split()), 1000, word=400)
        return f"{type(self).__name__}: {text}"


class DocumentError(CausalabError):
    """The document is not valid: bad JSON, wrong type, unknown key or name, missing file."""

    exit_code = 2


class PluginError(CausalabError):
    """A plugin is missing, duplicated, or broke its contract."""

    exit_code = 2


class MissingPlugin(PluginError):
    """A name a document gives (a kind, an engine) that no loaded plugin provides, or that two provide: the
    document's to fix, where a document names it."""


class PlanError(CausalabError):
    """A valid document that cannot be planned (or run) against this model and data."""

    exit_code = 1


class EngineError(CausalabError):
    """An engine refused or failed to run a plan."""

    exit_code = 1


class OutputError(CausalabError):
    """The output folder cannot be written as asked (it exists, or is not writable)."""

    exit_code = 2
