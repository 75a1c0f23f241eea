"""GET / POST (surface ``queues``): stuck work from every source, and redrive / delete.
See lib.endpoints.dead_letters."""

from lib.auth.gates import surface
from lib.endpoints.dead_letters import act_on_dead_letters, list_dead_letters
from lib.http.app import function_app
from lib.http.routing import guarded, route

app = function_app(
    route(
        "/api/admin/dead-letters",
        GET=guarded(surface("queues"), list_dead_letters),
        POST=guarded(surface("queues"), act_on_dead_letters),
    )
)
