"""Outbound requests to addresses a tenant chose: alert webhooks and feed URLs.

The model. A URL a tenant can store is input to every request made from it, so each such request
goes through one guard, in two places:

- ``destinations``: what may be reached. Before a request, the URL itself: ``http`` or ``https``,
  no credentials, no control characters, at most ``MAX_URL_CHARS``. At connect, the addresses:
  the host is resolved once, and the connection is refused unless every address is public (not
  loopback, private, link-local, shared, multicast, reserved, or any IPv6 form embedding one)
  or inside ``ERMIS_EGRESS_ALLOW``. ``redact_url`` is how a stored URL is shown and logged.
- ``client``: the httpx client that enforces it. Its network backend resolves, checks and then
  connects to the very address it checked (pinned: a second DNS answer is never asked for), with
  the URL's ``Host`` and TLS server name untouched; every redirect hop connects through the same
  backend. ``failure_detail`` turns any failure into the words a delivery log or feed state keeps.

Callers bound each request as a whole (``asyncio.timeout``), not per read.
"""
