"""GET (surface ``queues``): queue health from real counts. See lib.endpoints.queue_health."""

from lib.auth.gates import surface
from lib.endpoints.queue_health import read_queue_health
from lib.http.app import function_app
from lib.http.routing import guarded, route

app = function_app(route("/api/admin/queues", GET=guarded(surface("queues"), read_queue_health)))
