"""CONTRACTS §4 written out for the tests that hold the code to it: the platform roles each
surface admits (not read from ``lib.auth.roles``, which is what they check)."""

from __future__ import annotations

SURFACE_ROLES: dict[str, set[str]] = {
    "rss": {"super_admin", "ops"},
    "metering": {"super_admin", "billing"},
    "ledger": {"super_admin", "billing", "ops"},
    "state": {"super_admin", "ops"},
    "erasure": {"super_admin", "compliance"},
    "queues": {"super_admin", "ops"},
    "flags": {"super_admin"},
}

# CONTRACTS §7's cleanup answer, with the fields added since (each named in lib.jobs.state_cleanup).
CLEANUP_RESPONSE_FIELDS = {
    "deleted",
    "deletedHashRecords",
    "deletedBatchClaims",
    "deletedCronRuns",
    "deletedStreamChanges",
    "deletedWebhookDeliveries",
    "processedAt",
}
