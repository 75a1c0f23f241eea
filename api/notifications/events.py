"""GET (SSE, session): alerts, review events, failed deliveries and notifications.
See lib.streams.notifications."""

from lib.auth.gates import SESSION
from lib.http.app import function_app
from lib.http.routing import guarded, route
from lib.streams.notifications import notification_events

app = function_app(route("/api/notifications/events", GET=guarded(SESSION, notification_events)))
