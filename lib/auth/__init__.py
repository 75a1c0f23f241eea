"""Who may call what: cron bearer, Clerk sessions, platform surfaces, tenant capabilities."""
