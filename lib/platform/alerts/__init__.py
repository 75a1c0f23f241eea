"""Instant alerts: per-tenant rules, evaluation against stories, delivery, and the sweep."""
