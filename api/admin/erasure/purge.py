"""GET (cron) / POST (surface ``erasure``):
execute due GDPR erasure requests. Placeholder until issue #3 lands."""

from lib.http.planned import planned
from lib.jobs.cron_routes import cron_job_app

app = cron_job_app("/api/admin/erasure/purge", "erasure", planned(3))
