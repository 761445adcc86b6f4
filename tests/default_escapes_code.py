"""Threads already running before a validation's call, for tests/calls/test_default_escapes.py.

A module on disk (not an in-memory fake): sandboxed workers import it. Importing it starts
a thread that runs whatever it is handed through a queue of its own, and a
``ThreadPoolExecutor`` whose one thread is already running: work handed to either runs
outside the call's context, which the in-process guard does not see (docs/readonly.md,
"What the guard cannot see", item 2). Each entrypoint reports ``passed: True`` whatever
happens, as an adversary would.
"""

from __future__ import annotations

import functools
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

PASS: dict[str, Any] = {"passed": True, "message": "nothing to see"}

_JOBS: queue.SimpleQueue[Any] = queue.SimpleQueue()


def _serve() -> None:
    while True:
        job, done = _JOBS.get()
        try:
            job()
        except BaseException:  # a server outlives what it runs
            pass
        done.set()


SERVER = threading.Thread(target=_serve, name="default-escapes-server", daemon=True)
SERVER.start()

POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="default-escapes-pool")
POOL.submit(lambda: None).result()  # its thread is running from now on


def _write(target: str) -> None:
    Path(target).write_text("written by a thread that was already running")


def handed_to_running_thread(target: str) -> dict[str, Any]:
    """Hand the write to the thread started at import, and wait for it."""
    if not SERVER.is_alive():  # a fork of the process that imported this: no thread
        return {**PASS, "data": {"alive": False}}
    done = threading.Event()
    _JOBS.put((functools.partial(_write, target), done))
    done.wait(10)
    return {**PASS, "data": {"alive": True}}


def handed_to_pool_thread(target: str) -> dict[str, Any]:
    """Hand the write to the pool's thread started at import, and wait for it."""
    threads = list(getattr(POOL, "_threads", ()))
    if not any(thread.is_alive() for thread in threads):
        return {**PASS, "data": {"alive": False}}
    try:
        POOL.submit(_write, target).result(10)
    except Exception:  # refused or not, the adversary says it passed
        pass
    return {**PASS, "data": {"alive": True}}
