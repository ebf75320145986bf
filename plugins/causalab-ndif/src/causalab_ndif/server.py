"""What the client can learn about an NDIF server before sending it work: its host, ``/env`` and ``/status``.

The host is nnsight's own setting (``NDIF_HOST``, or ``API.HOST`` in nnsight's
config file); causalab has none of its own.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from causalab_core.errors import EngineError

from causalab_ndif.remote_errors import JobTimeout

TIMEOUT_S = 30


def resolved_host() -> str:
    """The host nnsight will send requests to, as a URL."""
    from nnsight import CONFIG

    host = CONFIG.API.HOST
    return host if "://" in host else f"https://{host}"


def get_json(host: str, path: str, timeout: float = TIMEOUT_S, told: float | None = None) -> Any:
    """GET ``host + path`` as JSON within ``timeout`` seconds; an unreachable, silent or failing server is one
    EngineError naming the host (a silent one: with ``told``, the run's whole timeout, else ``timeout``)."""
    request = urllib.request.Request(host.rstrip("/") + path, headers={"Accept": "application/json"})
    silent = EngineError(f"the NDIF server at {host} did not answer {path} within {told or timeout:g} s "
                         "(--option timeout=SECONDS)")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read().decode())
    except (TimeoutError, JobTimeout):  # the socket's own timeout, or the run's deadline (SIGALRM) first
        raise silent from None
    except urllib.error.HTTPError as exc:
        raise EngineError(f"the NDIF server at {host} answered {path} with HTTP {exc.code} ({exc.reason})") from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):  # the connection itself timed out
            raise silent from None
        raise EngineError(f"cannot reach the NDIF server at {host}: {exc.reason}") from None
    except OSError as exc:
        raise EngineError(f"cannot reach the NDIF server at {host}: {exc}") from None
    except ValueError:
        raise EngineError(f"the NDIF server at {host} answered {path} with something that is not JSON") from None


_ENV: dict[str, Any] = {}


def server_env(host: str, timeout: float = TIMEOUT_S, told: float | None = None) -> dict[str, Any]:
    """The server's ``/env`` (Python version and installed packages), asked once per host."""
    if host not in _ENV:
        _ENV[host] = get_json(host, "/env", timeout, told)
    return _ENV[host]


def served_models(host: str, timeout: float = TIMEOUT_S, told: float | None = None) -> dict[str, dict[str, Any]]:
    """Deployments the server runs now, by remote model key: ``{key: {"dtype", "state", "level"}}``."""
    status = get_json(host, "/status", timeout, told)
    served = {}
    for entry in status.get("deployments", {}).values():
        if entry.get("model_key") and entry.get("deployment_level") == "HOT":
            served[entry["model_key"]] = {"dtype": entry.get("dtype"), "state": entry.get("application_state")}
    return served


def server_record(host: str) -> dict[str, Any]:
    """run.json's ``server``: the host asked, and what its ``/env`` says of the watched packages."""
    from causalab_core.plugins.provenance import WATCHED

    try:
        env = server_env(host)
    except EngineError as exc:
        return {"asked": host, "answered": False, "error": str(exc)}
    packages = env.get("packages", {})
    return {
        "asked": host,
        "python": str(env.get("python_version", "")).split()[0],
        "versions": {name: packages.get(name) for name in WATCHED},
    }
