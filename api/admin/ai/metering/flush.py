"""GET (cron) / POST (surface ``metering``): drain the AI metering outbox to Polar.
See lib.jobs.ai_metering."""

from lib.jobs.ai_metering import ROUTE, flush_ai_metering_outbox_per_run
from lib.jobs.cron_routes import cron_job_app, guarded_json_job

app = cron_job_app(ROUTE, "metering", guarded_json_job(ROUTE, flush_ai_metering_outbox_per_run))
