"""Catalogs, tenants and drafts in the real database, for aggregation and stream tests and benchmarks."""

from __future__ import annotations

import json

import psycopg


async def set_catalog(db: psycopg.AsyncConnection, key: str, urls: list[str]) -> None:
    feeds = json.dumps([{"url": url, "name": url.rsplit("/", 1)[-1].removesuffix(".xml")} for url in urls])
    await db.execute(
        "INSERT INTO source_sets (key, feeds) VALUES (%s, %s::jsonb)"
        " ON CONFLICT (key) DO UPDATE SET feeds = EXCLUDED.feeds",
        (key, feeds),
    )


async def add_tenant(
    db: psycopg.AsyncConnection, tenant: str, catalog: str = "default", locale: str = "en", status: str = "completed"
) -> None:
    await db.execute(
        "INSERT INTO newsroom_profiles (tenant_scope_id, status, source_set_key, content_locale)"
        " VALUES (%s, %s, %s, %s)",
        (tenant, status, catalog, locale),
    )


async def add_draft(
    db: psycopg.AsyncConnection, tenant: str, story: str, phase: str = "synthesized", status: str = "review"
) -> None:
    await db.execute(
        "INSERT INTO editorial_story_drafts (id, tenant_scope_id, story_id, headline, status, phase)"
        " VALUES (%s, %s, %s, %s, %s, %s)",
        (f"{tenant}:{story}", tenant, story, f"Headline {story}", status, phase),
    )
