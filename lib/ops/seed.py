"""``scripts/seed``: demo data for the local runtime, so the first tick shows stories.

Creates, idempotently, against ``DATABASE_URL``:

- the ``default`` catalog (two world-news fixture feeds) and a ``tech`` catalog, whose feeds
  are the files in ``public/fixtures/feeds/`` served by the dev server's fixture feed server
  (never the internet; the one private destination the dev server allows);
- tenants ``org_demo_news`` and ``org_demo_wire`` (both ``default``/``en``, so they share one
  build) and ``org_demo_tech`` (``tech``);
- alert rules for ``org_demo_news`` (in-app "earthquake", critical; email "interest rates");
- one welcome notification per demo user, and prints a ``scripts/dev-token`` command for each
  user (owner of news, member of tech, the super admin).
"""

from __future__ import annotations

import argparse
import json

import psycopg

from lib.local.paths import dev_session
from lib.ops.cli import run_script, use_script_database

FIXTURE_FEEDS = {
    "default": ["world-wire", "global-desk"],
    "tech": ["tech-daily"],
}
TENANTS = {"org_demo_news": "default", "org_demo_wire": "default", "org_demo_tech": "tech"}
ALERT_RULES = {
    "org_demo_news": [
        {"id": "quakes", "keywords": ["earthquake", "tsunami"], "severity": "critical", "channel": "in-app"},
        {"id": "rates", "keywords": ["interest rates"], "severity": "info", "channel": "email"},
    ]
}
USERS = [
    ("user_demo_owner", "--org-id org_demo_news --org-role org:owner"),
    ("user_demo_member", "--org-id org_demo_tech --org-role org:member"),
    ("user_demo_admin", "--platform-role super_admin"),
]


def seed(database_url: str, base_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        for catalog, names in FIXTURE_FEEDS.items():
            feeds = [{"url": f"{base_url}/fixtures/feeds/{name}.xml", "name": name} for name in names]
            conn.execute(
                "INSERT INTO source_sets (key, feeds) VALUES (%s, %s::jsonb)"
                " ON CONFLICT (key) DO UPDATE SET feeds = EXCLUDED.feeds",
                (catalog, json.dumps(feeds)),
            )
        for tenant, catalog in TENANTS.items():
            conn.execute(
                "INSERT INTO newsroom_profiles (tenant_scope_id, status, source_set_key) VALUES (%s, 'completed', %s)"
                " ON CONFLICT (tenant_scope_id)"
                " DO UPDATE SET status = 'completed', source_set_key = EXCLUDED.source_set_key",
                (tenant, catalog),
            )
        for tenant, rules in ALERT_RULES.items():
            conn.execute(
                "INSERT INTO platform_state (key, value) VALUES (%s, %s::jsonb)"
                " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()",
                (f"platform:alerts-rules:{tenant}", json.dumps(rules)),
            )
        for user, _ in USERS:
            conn.execute(
                "INSERT INTO notifications (id, user_id, title, body, type) VALUES (%s, %s, %s, %s, 'system')"
                " ON CONFLICT (id) DO NOTHING",
                (f"welcome-{user}", user, "Welcome to ErmisAI", "Your demo newsroom is ready."),
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/seed", description="Demo catalogs, tenants, rules and users.")
    parser.add_argument(
        "--base-url", help="where /fixtures/feeds/ is served (default: the running dev server's fixture feed server)"
    )
    args = parser.parse_args(argv)
    return run_script(lambda: seed_and_report(args.base_url))


def seed_and_report(base_url_given: str | None) -> int:
    session = dev_session()
    base_url = (
        base_url_given or session.get("fixtureFeedsUrl") or session.get("url") or "http://127.0.0.1:3000"
    ).rstrip("/")
    seed(use_script_database(), base_url)
    print(
        f"seeded: catalogs {', '.join(FIXTURE_FEEDS)} (feeds at {base_url}/fixtures/feeds/),"
        f" tenants {', '.join(TENANTS)}"
    )
    for user, flags in USERS:
        print(f"  scripts/dev-token --sub {user} {flags}")
    print("fire the tick now with: scripts/cron rss-refresh")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
