"""POST (queue push, message HMAC): the rss.ingest consumer. See lib.queues.consumer and lib.queues.handlers."""

from lib.auth.gates import QUEUE_MESSAGE_HMAC
from lib.http.app import function_app
from lib.http.routing import guarded, route
from lib.queues.consumer import create_queue_consumer
from lib.queues.handlers import handle_rss_ingest
from lib.queues.topics import RSS_QUEUE_TOPICS

receive = create_queue_consumer(RSS_QUEUE_TOPICS["ingest"], handle_rss_ingest, module_file=__file__)
app = function_app(route("/api/queues/rss/ingest", POST=guarded(QUEUE_MESSAGE_HMAC, receive)))
