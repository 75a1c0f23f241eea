"""GET (session): the notification stream's polling fallback. See lib.streams.notifications."""

from lib.auth.gates import SESSION
from lib.http.app import function_app
from lib.http.routing import guarded, route
from lib.streams.notifications import notifications_snapshot

app = function_app(route("/api/notifications", GET=guarded(SESSION, notifications_snapshot)))
