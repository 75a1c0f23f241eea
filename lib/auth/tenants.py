"""The tenant id: one grammar and one canonical form, fixed at the session boundary (issue 21).

A tenant (a Clerk organisation) is named by the session's ``org_id``. The spec compares tenants
normalised — trimmed, then lower-cased, on both sides (``normalizeTenantId``) — so ``ORG_A`` and
`` org_a`` name one tenant. Here that rule is applied once, where the session is read:
``canonical_tenant_id`` trims the claim, checks it against ``TENANT_ID_GRAMMAR`` (ASCII letters,
digits and ``_ - . :``, at most ``MAX_TENANT_ID_LENGTH`` — every Clerk organisation id fits) and
lower-cases it. A claim outside the grammar (NUL, control characters, lone surrogates, anything
over-long) is no session at all: 401, never a 500 from the database. Being ASCII, the canonical
form is the same under JavaScript's ``toLocaleLowerCase('en')``, Python's ``lower`` and
Postgres's ``lower``.

Every read then uses the canonical value, and compares a stored row the same way —
``STORED_TENANT`` in SQL, ``normalize_tenant_id`` in Python — so a row written with other case
or stray spaces is still its tenant's, on every route alike.
"""

from __future__ import annotations

import re
from typing import Final

MAX_TENANT_ID_LENGTH: Final = 128
TENANT_ID_GRAMMAR: Final = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.:-]{{0,{MAX_TENANT_ID_LENGTH - 1}}}")
STORED_TENANT: Final = "lower(btrim(tenant_scope_id))"  # normalize_tenant_id, in SQL, for a row's column


class InvalidTenantId(ValueError):
    """The value is outside ``TENANT_ID_GRAMMAR``; the message is safe to show the caller."""


def normalize_tenant_id(tenant_scope_id: str | None) -> str:
    """The spec's comparison form of a stored value: trimmed, lower-cased (blank: ``""``)."""
    return (tenant_scope_id or "").strip().lower()


def canonical_tenant_id(raw: str) -> str:
    """The canonical tenant id for a value from outside (a session claim, an operator's body)."""
    trimmed = raw.strip()
    if TENANT_ID_GRAMMAR.fullmatch(trimmed) is None:
        raise InvalidTenantId(
            f"A tenant id is 1 to {MAX_TENANT_ID_LENGTH} ASCII letters, digits, '_', '-', '.' or ':'."
        )
    return trimmed.lower()
