"""A server's traceback, as nnsight hands it over, becomes the error a local run would raise."""

from __future__ import annotations

from nnsight.intervention.backends.remote import RemoteError

from causalab_core.errors import EngineError, PlanError
from causalab_ndif.remote_errors import local_error

SERVER_TRACEBACK = """Traceback (most recent call last):
  File "/srv/site-packages/causalab_nnterp/block.py", line 99, in run_plan
    results[step.path] = run_step(model, plan.prompts[step.input], step, store, batch_size, featurizers)
  File "/srv/site-packages/causalab_core/tensors.py", line 12, in featurizers_for
    raise PlanError(message)
causalab_core.errors.PlanError: write 'patch' needs featurizer 'das', which no step of this point trained
"""


def test_a_causalab_error_on_the_server_is_the_same_error_here():
    error = local_error(RemoteError(SERVER_TRACEBACK), "http://127.0.0.1:8001")
    assert type(error) is PlanError and error.exit_code == 1
    assert error.one_line() == "PlanError: write 'patch' needs featurizer 'das', which no step of this point trained"
    assert error.server_traceback == SERVER_TRACEBACK.strip()


def test_any_other_server_failure_is_one_engine_error_naming_the_host():
    skewed = SERVER_TRACEBACK.rsplit("\n", 2)[0] + "\nAttributeError: module 'causalab_core.tensors' has no attribute 'new_helper'\n"
    error = local_error(RemoteError(skewed), "http://srv:8001")
    assert type(error) is EngineError
    assert str(error) == ("the NDIF server at http://srv:8001 failed running the plan: "
                          "AttributeError: module 'causalab_core.tensors' has no attribute 'new_helper'")


def test_a_request_that_never_reached_the_server_names_the_host():
    error = local_error(ConnectionRefusedError("[Errno 111] Connection refused"), "http://srv:8001")
    assert type(error) is EngineError
    assert str(error) == "the request to the NDIF server at http://srv:8001 failed: ConnectionRefusedError: [Errno 111] Connection refused"
