"""POST (queue push, message HMAC): the rss.cluster consumer. See lib.queues.consumer and lib.queues.reserved."""

from lib.auth.gates import QUEUE_MESSAGE_HMAC
from lib.http.app import function_app
from lib.http.routing import guarded, route
from lib.queues.consumer import create_queue_consumer
from lib.queues.reserved import not_implemented
from lib.queues.topics import RSS_QUEUE_TOPICS

receive = create_queue_consumer(
    RSS_QUEUE_TOPICS["cluster"], not_implemented(RSS_QUEUE_TOPICS["cluster"]), module_file=__file__
)
app = function_app(route("/api/queues/rss/cluster", POST=guarded(QUEUE_MESSAGE_HMAC, receive)))
