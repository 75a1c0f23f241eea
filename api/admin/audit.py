"""GET (surface ``queues``): the operators' audit log. See lib.endpoints.operations."""

from lib.auth.gates import surface
from lib.endpoints.operations import read_audit
from lib.http.app import function_app
from lib.http.routing import guarded, route

app = function_app(route("/api/admin/audit", GET=guarded(surface("queues"), read_audit)))
