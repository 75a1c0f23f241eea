"""Provisioning and the SDK client (spec: ``isQueuesProvisioned``, ``getQueueRegion``).

The queue is *provisioned* when a queue token can be had: ``VERCEL_QUEUE_API_TOKEN`` (passed to
the SDK), the SDK's own ``VERCEL_QUEUE_TOKEN``, ``VERCEL_OIDC_TOKEN``, or — on Vercel
(``VERCEL=1``) — the OIDC token of the current request. Vercel does not put the OIDC token in
a Python function's environment: it sends it with each request as ``x-vercel-oidc-token``, and
Vercel's runtime puts the request headers into ``vercel.headers``' context, where
``vercel-oidc`` finds it. So apart from ``VERCEL_QUEUE_API_TOKEN`` the client is built with
no token and the SDK resolves one per call, the way it does on the platform.

Off the platform with no token the spec's in-process path runs (local development). On the
platform there is no in-process path: a client that cannot get a token raises
``QueueNotProvisioned``, loudly, rather than running work where its failure cannot be retried.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lib.lazy_imports import lazy_import
from lib.settings import get_settings, secret_or_none

if TYPE_CHECKING:
    from vercel.queue import QueueClient

vercel_headers = lazy_import("vercel.headers")
vercel_queue = lazy_import("vercel.queue")

DEFAULT_REGION = "iad1"
OIDC_HEADER = "x-vercel-oidc-token"


class QueueNotProvisioned(RuntimeError):
    pass


def _request_oidc_token() -> str | None:
    headers = vercel_headers.get_headers() or {}
    return (headers.get(OIDC_HEADER) or "").strip() or None


def is_queues_provisioned() -> bool:
    settings = get_settings()
    if any(
        secret_or_none(token)
        for token in (settings.vercel_queue_api_token, settings.vercel_queue_token, settings.vercel_oidc_token)
    ):
        return True
    return settings.on_vercel and _request_oidc_token() is not None


def uses_queue_service() -> bool:
    """Whether messages go through the queue service: when provisioned, and always on Vercel."""
    return is_queues_provisioned() or get_settings().on_vercel


def get_queue_region() -> str:
    return (get_settings().vercel_region or "").strip() or DEFAULT_REGION


def queue_client() -> QueueClient:
    """The SDK client for this environment; raises ``QueueNotProvisioned`` without a token."""
    if not is_queues_provisioned():
        raise QueueNotProvisioned(
            "no queue token: set VERCEL_QUEUE_API_TOKEN or VERCEL_OIDC_TOKEN, or on Vercel enable the "
            "project's OIDC token so requests carry x-vercel-oidc-token"
        )
    settings = get_settings()
    return vercel_queue.QueueClient(
        region=get_queue_region(),
        token=secret_or_none(settings.vercel_queue_api_token),
        base_url=settings.vercel_queue_base_url or None,
        deployment=vercel_queue.CURRENT_DEPLOYMENT if settings.vercel_deployment_id else vercel_queue.ALL_DEPLOYMENTS,
    )
