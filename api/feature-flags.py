"""GET (session): the caller's tenant-resolved feature flags. See lib.endpoints.flags."""

from lib.auth.gates import SESSION
from lib.endpoints.flags import read_my_flags
from lib.http.app import function_app
from lib.http.routing import guarded, route

app = function_app(route("/api/feature-flags", GET=guarded(SESSION, read_my_flags)))
