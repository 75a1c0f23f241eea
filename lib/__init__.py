"""ErmisAI's background work and realtime streams, as one Vercel Python function bundle.

Every file in ``api/`` builds its ASGI ``app`` from the packages here. The arrows point
down only: ``http``/``auth`` → ``jobs``/``queues``/``streams`` → ``platform`` → ``db``/``redis``.
``lib.local`` is the laptop's stand-in for Vercel (dev server, cron scheduler, embedded
services) and is never imported by a deployed function.
"""
