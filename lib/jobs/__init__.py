"""Scheduled jobs: the cron gate helpers, the cron route shape, and the drains."""
