"""GET (surface ``queues``): cron health and history. See lib.endpoints.operations."""

from lib.auth.gates import surface
from lib.endpoints.operations import read_crons
from lib.http.app import function_app
from lib.http.routing import guarded, route

app = function_app(route("/api/admin/crons", GET=guarded(surface("queues"), read_crons)))
