"""POST (queue push, message HMAC): the webhooks.deliver consumer — a webhook delivery's wake-up.
See lib.platform.alerts.webhooks and lib.queues.consumer."""

from lib.auth.gates import QUEUE_MESSAGE_HMAC
from lib.http.app import function_app
from lib.http.routing import guarded, route
from lib.platform.alerts.webhooks import on_wakeup
from lib.queues.consumer import create_queue_consumer
from lib.queues.topics import WEBHOOK_DELIVERY_TOPIC

receive = create_queue_consumer(WEBHOOK_DELIVERY_TOPIC, on_wakeup, module_file=__file__)
app = function_app(route("/api/queues/webhooks/deliver", POST=guarded(QUEUE_MESSAGE_HMAC, receive)))
