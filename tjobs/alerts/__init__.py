"""Alerts: rules watched once per cluster, notifications to channels (docs/operations.md, Built-in alerts).

===============  =================================================================================
module           owns
===============  =================================================================================
``rules``        the rule kinds, their parameters, and the pure evaluation (figures and ``now`` in)
``channels``     the channel kinds and their message formats (signed webhook, Slack, DingTalk, WeCom,
                 e-mail)
``notifier``     firing / repeat / resolved per rule and subject (the dedup key), pure
``figures``      reading what the rules need from the store and the coordinator
``sending``      one notification to one channel (HTTP through the callback transport, SMTP)
``evaluator``    the pass on the dispatcher leader: evaluate, write states by compare-and-set, send
``service``      managing rules and channels for the API, the CLI and the console
===============  =================================================================================

Storage: :class:`tjobs.stores.contracts.alerts.AlertSettings`.
"""
