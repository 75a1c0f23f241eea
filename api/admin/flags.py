"""GET / PUT (surface ``flags``): the feature flag store. See lib.endpoints.flags."""

from lib.auth.gates import surface
from lib.endpoints.flags import read_flags, update_flag
from lib.http.app import function_app
from lib.http.routing import guarded, route

app = function_app(
    route(
        "/api/admin/flags",
        GET=guarded(surface("flags"), read_flags),
        PUT=guarded(surface("flags"), update_flag),
    )
)
