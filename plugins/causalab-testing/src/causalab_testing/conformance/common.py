"""Shared by every suite: a fixture left to override, and parameters that refuse unknown keys."""

from __future__ import annotations


import pytest




UNKNOWN_KEY = "surely_not_a_parameter"


def must_override(name: str):
    raise NotImplementedError(f"override the `{name}` fixture in your conformance subclass")


def assert_params_forbid_unknown_keys(owner: str, params_cls: type, valid: dict) -> None:
    """``params_cls`` takes ``valid`` (the JSON form of a document's parameters) and refuses one more, unknown key."""
    import pydantic

    params_cls.model_validate(valid)
    try:
        params_cls.model_validate({**valid, UNKNOWN_KEY: 1})
    except pydantic.ValidationError:
        return
    pytest.fail(f"{owner}: {params_cls.__name__} accepted the unknown key {UNKNOWN_KEY!r}, so a misspelt key in "
                "a document would be silently ignored; set model_config = ConfigDict(extra=\"forbid\")", pytrace=False)
