"""GET (cron) / POST (surface ``state``): delete expired KV state. See lib.jobs.state_cleanup."""

from lib.jobs.cron_routes import cron_job_app
from lib.jobs.state_cleanup import ROUTE, run_state_cleanup

app = cron_job_app(ROUTE, "state", run_state_cleanup)
