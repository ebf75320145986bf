"""What a local Ray cluster started for a run leaves behind, ended with the run however it ends.

Ray's processes outlive a client that is SIGKILLed: its agents notice their raylet is gone, then wait up to a
minute to tell a GCS that is gone too. So the client starts this reaper beside the cluster, in a session of its
own: when the client's process is gone, it ends every process that carries the cluster's mark in its
environment (``MARK``, inherited by everything Ray starts) and removes the cluster's session folder.
``python -m causalab_ray.reaper PID FOLDER``; standard library only, so it starts in a blink.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

MARK = "CAUSALAB_RAY_SESSION"
OWNER = "owner.pid"
"""In a session folder: the pid of the client that made it (a folder whose owner is gone is a leftover)."""
PREFIX = "causalab-ray-"


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def marked(folder: str) -> list[int]:
    """The processes whose environment carries ``MARK=folder``."""
    needle = f"{MARK}={folder}".encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if needle in (entry / "environ").read_bytes() + b"\0":
                    found.append(int(entry.name))
            except OSError:
                continue  # gone, or not ours to read
    return found


def end(folder: str, grace: float = 1.0) -> None:
    """SIGTERM every marked process, SIGKILL what is left after ``grace`` seconds; remove the folder."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = marked(folder)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + grace
        while pids and time.monotonic() < deadline and any(running(p) for p in pids):
            time.sleep(0.05)
    shutil.rmtree(folder, ignore_errors=True)


def leftovers(root: str | None = None) -> list[Path]:
    """Session folders of earlier runs whose client is gone (killed before its reaper could start, or with it)."""
    found = []
    for folder in Path(root or tempfile.gettempdir()).glob(f"{PREFIX}*"):
        try:
            owner = int((folder / OWNER).read_text())
        except (OSError, ValueError):
            continue  # not one of ours, or still being made
        if not running(owner):
            found.append(folder)
    return found


def main(pid: int, folder: str) -> None:
    while running(pid):
        time.sleep(0.2)
    end(folder)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the client's terminal is not for the reaper
    main(int(sys.argv[1]), sys.argv[2])
