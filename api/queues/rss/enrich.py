"""POST (queue push, message HMAC): the rss.enrich consumer. See lib.queues.consumer and lib.queues.reserved."""

from lib.auth.gates import QUEUE_MESSAGE_HMAC
from lib.http.app import function_app
from lib.http.routing import guarded, route
from lib.queues.consumer import create_queue_consumer
from lib.queues.reserved import not_implemented
from lib.queues.topics import RSS_QUEUE_TOPICS

receive = create_queue_consumer(
    RSS_QUEUE_TOPICS["enrich"], not_implemented(RSS_QUEUE_TOPICS["enrich"]), module_file=__file__
)
app = function_app(route("/api/queues/rss/enrich", POST=guarded(QUEUE_MESSAGE_HMAC, receive)))
