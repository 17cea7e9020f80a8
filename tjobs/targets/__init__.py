"""Where a flow goes, as typed values: an inline callback URL, or a named, versioned target an app owns
(HTTP, gRPC, AMQP, NATS, Redis Streams).

- :mod:`tjobs.targets.urls` — the callback URL model: one parse, shared by validation, the target
  policy (:mod:`tjobs.delivery.ssrf`) and the transports;
- :mod:`tjobs.targets.model` — the typed target value the API stores and every transport reads;
- :mod:`tjobs.targets.codec` — its JSON form;
- :mod:`tjobs.targets.addresses` — where a broker or gRPC target connects, and the operator's
  allow-list of such addresses.

Pure values: nothing here does I/O, and nothing imports from a layer above (``docs/design.md``).
"""
