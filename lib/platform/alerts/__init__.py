"""Instant alerts: per-tenant rules (``rules``), evaluation against stories (``evaluation``),
delivery by channel (``delivery``, ``delivery_log``), webhook deliveries retried until delivered
or dead (``webhooks``, ``circuits``, ``dead_deliveries``), and the sweep (``sweep``)."""
