"""Provisioning and the SDK client (spec: ``isQueuesProvisioned``, ``getQueueRegion``).

The project is *provisioned* when ``VERCEL_OIDC_TOKEN`` or ``VERCEL_QUEUE_API_TOKEN`` is
non-empty: publishing then goes through ``vercel-queue``'s ``QueueClient`` (base URL from
``VERCEL_QUEUE_BASE_URL`` when set — the embedded service in development and tests). Off the
platform there is no deployment id, so the client addresses all deployments.
"""

from __future__ import annotations

from vercel.queue import ALL_DEPLOYMENTS, CURRENT_DEPLOYMENT, QueueClient

from lib.settings import get_settings, secret_or_none

DEFAULT_REGION = "iad1"


def is_queues_provisioned() -> bool:
    settings = get_settings()
    return bool(secret_or_none(settings.vercel_oidc_token) or secret_or_none(settings.vercel_queue_api_token))


def get_queue_region() -> str:
    return (get_settings().vercel_region or "").strip() or DEFAULT_REGION


def queue_client() -> QueueClient:
    """The SDK client for this environment; raises when it cannot be built."""
    settings = get_settings()
    token = secret_or_none(settings.vercel_queue_api_token) or secret_or_none(settings.vercel_oidc_token)
    return QueueClient(
        region=get_queue_region(),
        token=token,
        base_url=settings.vercel_queue_base_url or None,
        deployment=CURRENT_DEPLOYMENT if settings.vercel_deployment_id else ALL_DEPLOYMENTS,
    )
