"""GET (cron) / POST (surface ``rss``):
the ten-minute tick. Placeholder until issue #4 lands."""

from lib.http.planned import planned
from lib.jobs.cron_routes import cron_job_app

app = cron_job_app("/api/admin/rss/refresh", "rss", planned(4))
