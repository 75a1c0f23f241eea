"""Roles, surfaces and capabilities as data (CONTRACTS §4; the spec's platform-roles map).

A *surface* is an operator area of the platform (the POST of each cron, the admin routes);
each lists the platform roles that may use it. A *capability* is a tenant-level permission
derived from the organisation role, with the ``super_admin`` bypass where the spec gives one.
"""

from __future__ import annotations

from typing import Final

PLATFORM_ROLES: Final[frozenset[str]] = frozenset({"super_admin", "ops", "billing", "compliance"})
ORG_ROLES: Final[frozenset[str]] = frozenset({"org:owner", "org:admin", "org:member"})

SURFACE_ROLES: Final[dict[str, frozenset[str]]] = {
    "rss": frozenset({"super_admin", "ops"}),
    "metering": frozenset({"super_admin", "billing"}),
    "ledger": frozenset({"super_admin", "billing", "ops"}),
    "state": frozenset({"super_admin", "ops"}),
    "erasure": frozenset({"super_admin", "compliance"}),
    "queues": frozenset({"super_admin", "ops"}),
    "flags": frozenset({"super_admin"}),
}

CAPABILITY_ORG_ROLES: Final[dict[str, frozenset[str]]] = {
    "canEditStories": frozenset({"org:owner", "org:admin", "org:member"}),
    "canReviewTenant": frozenset({"org:owner", "org:admin"}),
}
CAPABILITY_PLATFORM_BYPASS: Final[dict[str, frozenset[str]]] = {
    "canEditStories": frozenset({"super_admin"}),
    "canReviewTenant": frozenset(),
}


def surface_allows(surface: str, platform_role: str | None) -> bool:
    return platform_role is not None and platform_role in SURFACE_ROLES[surface]


def capability_allows(capability: str, org_role: str | None, platform_role: str | None) -> bool:
    if platform_role is not None and platform_role in CAPABILITY_PLATFORM_BYPASS[capability]:
        return True
    return org_role is not None and org_role in CAPABILITY_ORG_ROLES[capability]


def can_review_all_tenants(platform_role: str | None) -> bool:
    """Platform review: ``super_admin`` sees every tenant's review events."""
    return platform_role == "super_admin"
