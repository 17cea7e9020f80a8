"""Run reports answered below ASGI (:mod:`tjobs.api.lean_protocol`).

An executor reports each run it accepted (``POST /v1/flows/{flow_id}/report``, README "Job runs"): at
least once a run, its end, and with progress as often as it likes. Through the ASGI layers a report cost
the node several times what deciding and writing it costs (issue 30). :class:`ReportPath` serves a plain
report with what :func:`tjobs.api.routes_flows.report_run` does: the authentication and request
admission the module above keeps, the body parsed within ``limits.max_json_depth`` (422 naming the
field), :meth:`tjobs.service.runs.RunService.report` (its 404, 409, 413 and 422), and 200 with the
run's JSON (:func:`tjobs.api.routes_flows.run_answer_json`); metrics under the route's template. A
flow id that is not ``<digits>-<digits>`` as sent goes through ASGI (which answers 404 for it), as does
what the module above leaves there for a route with a JSON body.
"""

from __future__ import annotations

import re

import orjson

from tjobs.api.bodies import parse_json
from tjobs.api.lean_protocol import Answer, LeanProtocol
from tjobs.api.routes_flows import run_answer_json
from tjobs.model import App

_REPORT = re.compile(rb"/v1/flows/([0-9]{1,19}-[0-9]{1,19})/report")
_AS_ROUTE = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY  # what the route's ORJSONResponse renders with


class ReportPath(LeanProtocol):
    """Takes plain run reports (see the module); anything else is the next route's."""

    def _take(self) -> bool:
        return self._take_report() or super()._take()

    def _take_report(self) -> bool:
        if not self.lean.serve_reports or self.parser.get_method() != b"POST":
            return False
        match = _REPORT.fullmatch(self.url)
        if match is None:
            return False
        flow_id = match[1].decode()

        async def report(app: App, raw: bytes) -> Answer:
            return await self._report(app, flow_id, raw)

        return self._take_json(self.lean.report_template, report)

    async def _report(self, app: App, flow_id: str, raw: bytes) -> Answer:
        """What :func:`tjobs.api.routes_flows.report_run` does once the request is admitted."""
        lean = self.lean
        node = lean.node
        try:
            answer = await node.runs.report(app, flow_id, parse_json(raw, node.settings.limits.max_json_depth))
            return 200, orjson.dumps(run_answer_json(answer), option=_AS_ROUTE), None, None
        finally:
            lean.reports += 1
