"""The HTTP transport under its former name, for code that still imports ``tjobs.delivery.sender``.

New code imports the contract from :mod:`tjobs.delivery.transport` and the HTTP transport from
:mod:`tjobs.delivery.http`.
"""

from tjobs.delivery.http import HttpTransport
from tjobs.delivery.transport import AttemptResult, CallbackRequest, Route, TargetPolicy

CallbackSender = HttpTransport

__all__ = ["AttemptResult", "CallbackRequest", "CallbackSender", "Route", "TargetPolicy"]
