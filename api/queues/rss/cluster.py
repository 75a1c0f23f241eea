"""POST (queue push, message HMAC): the rss.cluster consumer. Placeholder until issue #5 lands."""

from lib.auth.gates import QUEUE_MESSAGE_HMAC
from lib.http.app import function_app
from lib.http.planned import planned
from lib.http.routing import guarded, route

app = function_app(route("/api/queues/rss/cluster", POST=guarded(QUEUE_MESSAGE_HMAC, planned(5))))
