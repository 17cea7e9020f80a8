"""tjobs: massive task triggering — sharded timers fired on time, with durable flows and signed callbacks."""

__version__ = "0.1.0"
