"""GET (cron) / POST (surface ``rss``): the ten-minute tick. See lib.jobs.rss_refresh."""

from lib.jobs.cron_routes import cron_job_app, guarded_json_job
from lib.jobs.rss_refresh import ROUTE, run_manual_refresh, run_scheduled_refresh

app = cron_job_app(
    ROUTE, "rss", guarded_json_job(ROUTE, run_scheduled_refresh), guarded_json_job(ROUTE, run_manual_refresh)
)
