"""What every operator script shares (``scripts/erasure``, ``seed``, ``pipeline``, ``cron``,
``migrate``): one way to find the database — ``DATABASE_URL``, else the running dev server's
(``lib.local.paths.dev_session``) — and failures as one line on stderr that says what is wrong
and what to do, never a traceback.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable

import httpx
import psycopg

from lib.db.pool import DatabaseNotConfigured
from lib.local.paths import dev_session
from lib.settings import get_settings


class ScriptError(RuntimeError):
    """A failure the operator can act on; its message says what to do."""


def use_script_database() -> str:
    """Point this process at ``DATABASE_URL``, or at the running dev server's database."""
    url = os.environ.get("DATABASE_URL") or dev_session().get("databaseUrl")
    if not url:
        raise ScriptError("DATABASE_URL is not set and no dev server is running: set it, or start scripts/dev")
    os.environ["DATABASE_URL"] = url
    get_settings.cache_clear()
    return url


def run_script(main: Callable[[], int]) -> int:
    # The pool logs each failed connection attempt itself; the script says it once, below.
    logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)
    try:
        return main()
    except ScriptError as error:
        message = str(error)
        code = 2
    except DatabaseNotConfigured:
        message, code = "DATABASE_URL is not set: set it, or start scripts/dev", 2
    except psycopg.OperationalError as error:
        first_line = (str(error).splitlines() or [type(error).__name__])[0]
        message, code = f"cannot reach the database ({first_line}): is it running, and is DATABASE_URL right?", 1
    except httpx.HTTPError as error:
        message, code = f"cannot reach the server ({error}): is scripts/dev running, or --url right?", 1
    print(f"error: {message}", file=sys.stderr)
    return code
