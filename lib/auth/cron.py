"""The cron bearer: the spec's ``isAuthorizedCronRequest``.

Vercel sends ``Authorization: Bearer $CRON_SECRET`` with every cron invocation. The header is
compared with ``hmac.compare_digest`` after a length check; the length check leaks nothing
because the expected length is fixed by the configured value, not by the input. An unset or
blank ``CRON_SECRET`` authorises nothing (fail closed).
"""

from __future__ import annotations

import hmac

from starlette.requests import Request

from lib.settings import get_settings, secret_or_none


def is_authorized_cron_request(request: Request) -> bool:
    secret = secret_or_none(get_settings().cron_secret)
    if secret is None:
        return False
    expected = f"Bearer {secret}".encode()
    presented = request.headers.get("authorization", "").encode()
    if len(presented) != len(expected):
        return False
    return hmac.compare_digest(presented, expected)
