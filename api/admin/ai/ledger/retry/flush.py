"""GET (cron) / POST (surface ``ledger``): redrive AI ledger entries from Redis.
See lib.jobs.ai_ledger_redrive."""

from lib.jobs.ai_ledger_redrive import ROUTE, redrive_failed_ai_ledger_entries
from lib.jobs.cron_routes import cron_job_app, guarded_json_job

app = cron_job_app(ROUTE, "ledger", guarded_json_job(ROUTE, redrive_failed_ai_ledger_entries))
