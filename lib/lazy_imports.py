"""Deferred imports: a dependency is loaded when a request first uses it, not when the function
starts (issue 23; what a cold start costs is in benchmarks/README.md).

The model. A function's start imports its ``api/`` file, Starlette and our own code, nothing
else. Every third-party dependency beyond Starlette — the database driver, JWT and its crypto,
pydantic, the Redis clients, the queue SDK, httpx, croniter, feedparser, the Polar SDK, Sentry,
boto3 — is bound at the top of the module that uses it as a stand-in::

    psycopg = lazy_import("psycopg")
    psycopg_json = lazy_import("psycopg.types.json")

The stand-in is a module object whose first attribute access imports the real module
(``importlib.import_module``, under the interpreter's import lock, so two first uses at once
import it once) and from then on forwards every attribute to it. So code reads as it would with
a plain ``import``, a request that never touches the dependency (a 401, a HEAD, a cron with
nothing to do) never pays for it, and ``tests/test_lazy_imports.py`` can prove, per function,
that nothing on its deny list is loaded at start. Names needed only in annotations are
imported under ``typing.TYPE_CHECKING``, which costs nothing at run time.

A module of ours whose top level needs such a dependency — it defines pydantic models
(``lib.contracts.stream_events``, ``lib.endpoints.request_bodies``, ``lib.platform.ai_usage``) or
builds a value from one — is bound the same way by the modules that use it, so the dependency
still loads only when a request reaches it. Everything else of ours is imported plainly.

This is what PEP 810 makes a keyword (``lazy import psycopg``, Python 3.15); the functions run
on 3.12, so here it is a stand-in object. ``importlib.util.LazyLoader`` was the other choice; it
cannot defer a submodule (finding ``psycopg.types.json`` imports ``psycopg``), this can.
"""

from __future__ import annotations

import importlib
import types
from typing import Any


class LazyModule(types.ModuleType):
    """A module that is imported on first attribute access (see the module docstring)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__dict__["_lazy_module"] = None

    def _loaded(self) -> types.ModuleType:
        module = self.__dict__["_lazy_module"]
        if module is None:
            module = importlib.import_module(self.__name__)
            self.__dict__["_lazy_module"] = module
        return module

    def __getattr__(self, attribute: str) -> Any:
        # Only called for names this stand-in does not hold itself: every public attribute.
        return getattr(self._loaded(), attribute)

    def __dir__(self) -> list[str]:
        return dir(self._loaded())

    def __repr__(self) -> str:
        state = "loaded" if self.__dict__["_lazy_module"] is not None else "not loaded yet"
        return f"<lazy module {self.__name__!r} ({state})>"


def lazy_import(name: str) -> Any:
    """A stand-in for ``import name`` that imports it on first use; typed ``Any`` because it
    behaves as whichever module it names."""
    return LazyModule(name)
