"""The notification stream's reads (spec: the notification stream): what an audience may see, as
one channel of the stream log per kind, read by position and shaped into events once for every
stream that shares the read.

What a connection may see (its *audience*) is decided server-side from the session, on connect,
as one channel of the stream log (``lib.platform.activity``) per kind (``channels_of``):

- alerts and failed deliveries: the session's tenant (normalised; none without a tenant);
- review events: the own tenant for a tenant reviewer (owner, admin), every tenant for the
  platform reviewer (``super_admin``), and for anyone else the read is never issued;
- notifications: the user's own.

A read that a change made is answered from the rows the change detector told on the bus when
they cover the stream's position (``tails``): a busy tenant's streams cost Postgres nothing per
change, however many processes hold them. Other reads are shared at two levels: a channel's page
by every stream at the same position of it (a tenant's alerts by all its users,
``_start_kind_read``), and an audience's read of all its kinds by its streams at the same cursor
and change (``start_audience_read``). Each row is validated by its contract and serialised once
where it is shared (``events``). A row that breaks its contract is dropped (reported), never sent
half-formed; a row gone since it was logged is skipped. Only the newest read of each key is kept,
so the pages of a burst are freed as they are passed.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from lib.auth.roles import can_review_all_tenants, capability_allows
from lib.auth.sessions import Session
from lib.platform import activity
from lib.streams.events import SOURCES, KindPage, shaped
from lib.streams.listener import (
    AudienceKey,
    audience_key,
    change_listener,
    positioned_before_read,
    reading_for_a_change,
)
from lib.streams.positions import Cursor
from lib.streams.shared_reads import SharedReads

REPLAY_LIMIT = 20
PAGE_SIZE = 200  # rows per kind per read: a frame chunk stays around 100 KB at most

shared_audience_reads = SharedReads()
shared_channel_reads = SharedReads()


@dataclass(frozen=True)
class Audience:
    user_id: str
    tenant: str | None
    review_scope: str | None  # a tenant, ALL_TENANTS, or None: no review events at all


def audience_for(session: Session) -> Audience:
    if can_review_all_tenants(session.platform_role):
        review_scope: str | None = activity.ALL_TENANTS
    elif capability_allows("canReviewTenant", session.org_role, session.platform_role):
        review_scope = session.tenant_scope_id
    else:
        review_scope = None
    return Audience(session.user_id, session.tenant_scope_id, review_scope)


REPLAYED_KINDS = ("alert.triggered", "review.status.changed", "delivery.failed")


@dataclass(frozen=True)
class AudienceRead:
    """Every kind an audience reads, read after ``after`` (the cursor's positions; ``None``: the
    connect read — the newest rows and the heads)."""

    after: tuple[int, ...] | None
    epoch: str
    pages: dict[str, KindPage]
    # What the streams sharing this read made of it, by what they made it for (``notifications``):
    # the tabs of one user at one cursor send the same bytes, made once.
    rendered: dict[Hashable, Any] = field(default_factory=dict, compare=False, repr=False)


@functools.lru_cache(maxsize=4096)
def channels_of(audience: Audience) -> dict[str, str]:
    """The channel each kind this audience may see is read from (``activity``); a kind it may not
    see — no tenant, no review capability — has none, and its read is never issued. The same
    (shared, not to be changed) dict for every stream of an audience."""
    channels = {
        "alert.triggered": activity.tenant_channel("alerts", audience.tenant),
        "review.status.changed": activity.review_channel(audience.review_scope),
        "delivery.failed": activity.tenant_channel("deliveries", audience.tenant),
        "notification.created": activity.user_channel(audience.user_id),
    }
    return {kind: channel for kind, channel in channels.items() if channel is not None}


@functools.lru_cache(maxsize=4096)
def audience_keys(audience: Audience) -> tuple[AudienceKey, ...]:
    """The change notifications this audience's reads depend on (``listener``): a channel's name
    is its notification's ``<kind>|<value>`` (``review|*`` waits on every review value)."""
    return tuple(dict.fromkeys(audience_key(channel) for channel in channels_of(audience).values()))


def _start_kind_read(
    kind: str,
    channel: str,
    after: int | None,
    limit: int,
    read_key: Hashable,
    window_s: float,
    initial: bool,
    not_before: float | None = None,
) -> asyncio.Future[KindPage]:
    """One channel's read, shared by every stream (of every user) at the same position of it:
    only the newest read of each is kept, so the pages of a burst are freed as they are passed.
    A read a change made is answered from the rows the bus told (``tails``) when they cover it;
    a stream's first read (``not_before``) from Postgres, by reads started since it opened."""
    if after is not None and not_before is None and reading_for_a_change():
        told = change_listener().tails.page(channel, after, limit)
        if told is not None:
            done: asyncio.Future[KindPage] = asyncio.get_running_loop().create_future()
            done.set_result(told)
            return done
    source = SOURCES[kind]

    async def load() -> KindPage:
        if after is None:
            read = await activity.latest_in_channel(source, channel, limit)
        else:
            read = await activity.after_in_channel(source, channel, after, limit)
        return shaped(kind, read, initial)

    mode = "latest" if after is None else "after"
    return shared_channel_reads.start((channel, mode, limit, initial), load, window_s, (after, read_key), not_before)


def read_after(cursor: Cursor | None, channels: dict[str, str]) -> tuple[int, ...] | None:
    """What a read for a stream at ``cursor`` reads after (``None``: it is connecting)."""
    return None if cursor is None else tuple(cursor.positions[kind] for kind in channels)


def start_audience_read(
    audience: Audience,
    cursor: Cursor | None,
    read_keys: dict[AudienceKey, Hashable],
    window_s: float,
    not_before: float | None = None,
) -> asyncio.Future[AudienceRead]:
    """What a stream of ``audience`` at ``cursor`` reads now (``None``: it is connecting), shared
    by the streams of the audience at the same cursor and change (``read_keys``: the read key of
    each of ``audience_keys``, ``ChangeWatch.read_keys``). Each kind is shared wider (a tenant's
    alerts by all its users) and read again only when its own channel changed. A stream's first
    read (``not_before``: when it opened) shares only reads started since, and positions what
    has committed before it reads, as a connect always did (``SharedReads``)."""
    channels = channels_of(audience)
    after = read_after(cursor, channels)

    async def load() -> AudienceRead:
        if after is None or not_before is not None or not change_listener().healthy:
            await positioned_before_read()
        reads = {}
        for index, (kind, channel) in enumerate(channels.items()):
            read_key = read_keys.get(audience_key(channel))
            if after is None:
                limit = REPLAY_LIMIT if kind in REPLAYED_KINDS else 0
                reads[kind] = _start_kind_read(kind, channel, None, limit, read_key, window_s, True, not_before)
            else:
                reads[kind] = _start_kind_read(
                    kind, channel, after[index], PAGE_SIZE, read_key, window_s, False, not_before
                )
        return await _audience_read(after, reads)

    version = (after, tuple(read_keys.values()))
    return shared_audience_reads.start(audience, load, window_s, version, not_before)


async def read_snapshot(audience: Audience, limit: int) -> AudienceRead:
    """The newest ``limit`` rows of every channel the audience reads, afresh (the polling
    fallback): its heads are the cursor a stream resumes from after it — every row committed
    before the call is among them or below them."""
    await positioned_before_read()
    reads = {  # window 0: a fresh read
        kind: _start_kind_read(kind, channel, None, limit, None, 0, initial=False)
        for kind, channel in channels_of(audience).items()
    }
    return await _audience_read(None, reads)


async def _audience_read(after: tuple[int, ...] | None, reads: dict[str, asyncio.Future[KindPage]]) -> AudienceRead:
    """The kinds' reads, started together by the caller, awaited one by one here (shielded: other
    streams share them)."""
    epoch = await activity.stream_log_epoch()
    return AudienceRead(after, epoch, {kind: await asyncio.shield(read) for kind, read in reads.items()})
