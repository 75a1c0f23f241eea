"""GET (cron) / POST (surface ``erasure``): execute due GDPR erasure requests.
See lib.jobs.erasure_purge."""

from lib.jobs.cron_routes import cron_job_app, guarded_json_job
from lib.jobs.erasure_purge import ROUTE, purge_due_data_erasure_requests

app = cron_job_app(ROUTE, "erasure", guarded_json_job(ROUTE, purge_due_data_erasure_requests))
