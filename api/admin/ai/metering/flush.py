"""GET (cron) / POST (surface ``metering``):
drain the AI metering outbox to Polar. Placeholder until issue #3 lands."""

from lib.http.planned import planned
from lib.jobs.cron_routes import cron_job_app

app = cron_job_app("/api/admin/ai/metering/flush", "metering", planned(3))
