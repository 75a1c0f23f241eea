"""GET (surface ``queues``): the streams' change path. See lib.endpoints.stream_health."""

from lib.auth.gates import surface
from lib.endpoints.stream_health import read_stream_health
from lib.http.app import function_app
from lib.http.routing import guarded, route

app = function_app(route("/api/admin/streams", GET=guarded(surface("queues"), read_stream_health)))
