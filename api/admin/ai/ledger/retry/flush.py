"""GET (cron) / POST (surface ``ledger``): redrive AI ledger entries from Redis, then the stale
cron watchdog. See lib.jobs.ai_ledger_redrive and lib.jobs.cron_health."""

from lib.jobs.ai_ledger_redrive import ROUTE, redrive_failed_ai_ledger_entries
from lib.jobs.cron_health import with_stale_cron_watchdog
from lib.jobs.cron_routes import cron_job_app, guarded_json_job

app = cron_job_app(ROUTE, "ledger", guarded_json_job(ROUTE, with_stale_cron_watchdog(redrive_failed_ai_ledger_entries)))
