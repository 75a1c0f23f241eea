"""GET (cron) / POST (surface ``ledger``):
redrive AI ledger entries from Redis. Placeholder until issue #3 lands."""

from lib.http.planned import planned
from lib.jobs.cron_routes import cron_job_app

app = cron_job_app("/api/admin/ai/ledger/retry/flush", "ledger", planned(3))
