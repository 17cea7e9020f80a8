"""Delivery targets: named, versioned destinations an app owns (HTTP, gRPC, AMQP, NATS, Redis Streams).

- :mod:`tjobs.targets.model` — the typed target value the API stores and every transport reads.
"""
