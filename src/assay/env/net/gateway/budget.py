"""Each phase's allowance of calls and dollars, kept with a reservation per call in flight.

Every phase (`dev` while the agent works, `prod` while delivered code is graded; switch with
`gateway.phase = "prod"`) has an allowance of calls and dollars (`Budget`).

Reserve, then settle. Before a call is forwarded, its upper-bound cost (`reserved_usd`) is
priced with `prices.cost_usd` and the gateway's one price, from the call's bound
(`assay.env.net.gateway.rules`). A call is admitted only if the phase's calls so far (in
flight included) are under `max_calls` and spent + reserved by calls in flight + its own
bound <= `max_usd`; otherwise it gets 429 `budget_exceeded` and nothing goes upstream. An
admitted call counts as a call whatever its outcome. The check and the reservation run with
no await between them on the gateway's one event loop, so no other request can be admitted
in between (the event loop is the lock). When the call ends its reservation is released and
it is settled at its actual cost, the reply's usage. A call whose cost cannot be known is
settled at its reservation and not retried (a retry could be billed again): cancelled in
flight (the gateway stopped), timed out or cut off after it was sent, or a 200 that is not a
JSON object.

The bound: after every admission, spent + reserved <= max_usd; settling replaces a
reservation by the call's cost, which is at most the reservation unless the provider bills
past the bounds above (more input tokens than bytes, an image dearer than the allowance),
and such an excess is recorded (`excess_usd`) and logged. So a phase's spend never passes
`max_usd` + the sum of the recorded excesses, however many calls run at once, and it admits
at most `max_calls` calls. A smaller call may be admitted after a larger one was refused.

Every request (forwarded, refused for the budget, rejected as malformed, oversized or
unsupported) is a `GatewayRecord` in `records` and a JSON line in `log_path`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import BaseModel, Field

from assay.env.net.gateway.rules import Call, Reject
from assay.env.net.gateway.upstream import Reply
from assay.llm.prices import Price, cost_usd
from assay.record import Usage

__all__ = ["DEFAULT_BUDGETS", "Budget", "GatewayRecord", "Ledger", "Phase", "PhaseTotals", "Refusal", "usage_of"]

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class Budget:
    """Allowance of one phase; None means no cap on that measure."""

    max_calls: int | None = None
    max_usd: float | None = None


DEFAULT_BUDGETS: dict[str, Budget] = {"dev": Budget(300, 0.25), "prod": Budget(600, 0.30)}
"""FDE-Gym's defaults for engagement.json `dev_llm_calls`/`dev_llm_usd`/`prod_llm_calls`/`prod_llm_usd`."""


class PhaseTotals(BaseModel):
    """What one phase used (`summary()["by_phase"]`, reported on the run as `grade.llm.by_phase`)."""

    calls: int = 0  # admitted and forwarded upstream (whatever the outcome)
    usd: float = 0.0  # settled: the replies' usage, or the reservation of a call whose cost is unknown
    refused: int = 0  # budget refusals (429)
    rejected: int = 0  # malformed, oversized or unsupported requests (4xx from the gateway itself)
    upstream_errors: int = 0  # forwarded calls that did not end in a 200
    input_tokens: int = 0  # non-cached prompt tokens
    cache_read_tokens: int = 0
    output_tokens: int = 0


class GatewayRecord(BaseModel):
    """One request to the gateway: an element of `records`, a JSON line of the log."""

    schema_version: int = 1
    ts: float
    phase: str
    model: str
    endpoint: str | None
    status: int
    outcome: Literal["forwarded", "refused", "rejected"]
    error: str | None = None
    error_type: str | None = None
    request_chars: int | None = None  # counted against the input cap
    forced: list[str] = Field(default_factory=list)  # request fields the gateway changed or removed
    reserved_usd: float | None = None  # the call's upper-bound cost, reserved before forwarding
    cost_usd: float | None = None  # what the call was settled at (None: no price)
    cost_basis: Literal["usage", "reserved"] | None = None  # the reply's usage, or the reservation (cost unknown)
    excess_usd: float | None = None  # settled cost above the reservation: the provider billed past the bound
    input_tokens: int = 0
    cache_read_tokens: int = 0
    output_tokens: int = 0
    duration_s: float | None = None


@dataclass
class Phase:
    totals: PhaseTotals = field(default_factory=PhaseTotals)
    reserved_usd: float = 0.0  # held by the calls in flight
    in_flight: int = 0


class Refusal(Reject):
    """A call the phase's budget cannot take (429 budget_exceeded)."""

    def __init__(self, message: str, chars: int | None = None) -> None:
        super().__init__(429, message, "budget_exceeded", chars=chars)


def usage_of(data: Any) -> Usage:
    """assay Usage from an OpenAI `usage` object (prompt_tokens include the cached ones)."""
    u = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(u, dict):
        return Usage()

    def num(v: Any) -> int:
        return int(v) if isinstance(v, int | float) and not isinstance(v, bool) and v > 0 else 0

    details = u.get("prompt_tokens_details")
    cached = num(details.get("cached_tokens")) if isinstance(details, dict) else 0
    prompt = num(u.get("prompt_tokens"))
    return Usage(input_tokens=max(0, prompt - cached), cache_read_tokens=min(cached, prompt),
                 output_tokens=num(u.get("completion_tokens")))


class Ledger:
    """The gateway's accounting (a part of `LLMGateway`): each phase's totals and reservations,
    admission against its budget, and the record of every request."""

    model: str
    price: Price | None
    budgets: dict[str, Budget]
    phase: str
    log_path: Path | None
    records: list[GatewayRecord]
    _phases: dict[str, Phase]
    _log: IO[str] | None

    def _p(self, phase: str) -> Phase:
        return self._phases.setdefault(phase, Phase())

    def _t(self, phase: str) -> PhaseTotals:
        return self._p(phase).totals

    def budget(self, phase: str | None = None) -> Budget:
        return self.budgets.get(phase or self.phase, Budget())

    def status(self) -> dict[str, Any]:
        """What the current phase has used and may use (GET /v1/budget, upstream's `budget()`).

        The phase's name is left out, here and in refusals: delivered code must not be able to
        tell grading from development by asking the gateway.
        """
        t, b = self._t(self.phase), self.budget()
        return {"model": self.model, "calls": t.calls, "max_calls": b.max_calls,
                "usd": round(t.usd, 6), "max_usd": b.max_usd}

    def summary(self) -> dict[str, Any]:
        """{calls, usd, refused, rejected, by_phase: {phase: PhaseTotals}} over the gateway's life."""
        totals = [p.totals for p in self._phases.values()]
        by_phase = {name: {**p.totals.model_dump(), "usd": round(p.totals.usd, 8)} for name, p in self._phases.items()}
        return {"calls": sum(t.calls for t in totals),
                "usd": round(sum(t.usd for t in totals), 8),
                "refused": sum(t.refused for t in totals),
                "rejected": sum(t.rejected for t in totals),
                "by_phase": by_phase}

    def _record(self, rec: GatewayRecord) -> None:
        self.records.append(rec)
        if self._log is not None:
            try:
                self._log.write(rec.model_dump_json(exclude_none=True) + "\n")
                self._log.flush()
            except OSError:
                log.exception("cannot write the LLM gateway log %s", self.log_path)

    def _new_record(self, phase: str, endpoint: str | None, status: int,
                    outcome: Literal["forwarded", "refused", "rejected"], **fields: Any) -> GatewayRecord:
        return GatewayRecord(ts=round(time.time(), 3), phase=phase, model=self.model, endpoint=endpoint,
                             status=status, outcome=outcome, **fields)

    def _refuse(self, phase: str, endpoint: str | None, r: Reject) -> None:
        """Count and record a request the gateway answered itself (a refusal or a rejection)."""
        refused = isinstance(r, Refusal)
        t = self._t(phase)
        if refused:
            t.refused += 1
        else:
            t.rejected += 1
        self._record(self._new_record(phase, endpoint, r.status, "refused" if refused else "rejected",
                                      error=r.message, error_type=r.code, request_chars=r.chars))

    def _bound_usd(self, call: Call) -> float | None:
        """The most `call` can cost (None: unbounded, or no price)."""
        if call.bound is None or self.price is None:
            return None
        as_cached = Usage(cache_read_tokens=call.bound.input_tokens, output_tokens=call.bound.output_tokens)
        costs = [cost_usd(call.bound, self.price), cost_usd(as_cached, self.price)]
        return max(c for c in costs if c is not None)

    def _reserve(self, phase: str, call: Call) -> float | None:
        """Admit `call` against the phase's caps and reserve its bound (returned; None: the call
        has none, which only a phase without a dollar cap admits), or raise Refusal.

        No await in here: on the gateway's one event loop no other request is admitted between
        this check and this reservation.
        """
        p, b = self._p(phase), self.budget(phase)
        t = p.totals
        if b.max_calls is not None and t.calls >= b.max_calls:
            raise Refusal(f"LLM budget exhausted: {t.calls} of {b.max_calls} calls used", call.chars)
        bound = self._bound_usd(call)
        if b.max_usd is not None:
            if bound is None:
                raise Refusal("LLM budget exhausted: the cost of this call has no bound", call.chars)
            if t.usd >= b.max_usd:
                raise Refusal(f"LLM budget exhausted: ${t.usd:.4f} of ${b.max_usd:.2f} spent", call.chars)
            if t.usd + p.reserved_usd + bound > b.max_usd:
                raise Refusal(f"LLM budget exhausted: ${t.usd:.4f} spent and ${p.reserved_usd:.4f} held by calls "
                              f"in flight, of ${b.max_usd:.2f}; this call may cost up to ${bound:.4f}",
                              call.chars)
        t.calls += 1
        p.in_flight += 1
        p.reserved_usd += bound or 0.0
        return bound

    def _settle(self, phase: str, call: Call, reserved: float | None, reply: Reply | None, endpoint: str,
                seconds: float) -> None:
        """Release the call's reservation and count what it cost; record it."""
        p = self._p(phase)
        t = p.totals
        p.in_flight -= 1
        p.reserved_usd = p.reserved_usd - (reserved or 0.0) if p.in_flight > 0 else 0.0  # no residue once idle
        usage = usage_of(reply.payload) if reply is not None and reply.status == 200 else Usage()
        basis: Literal["usage", "reserved"] | None = None
        cost: float | None = 0.0
        if reply is None or reply.cost_unknown:  # cancelled, or cut off after it was sent: maybe billed
            cost, basis = reserved, ("reserved" if reserved is not None else None)
        elif reply.status == 200:
            cost, basis = cost_usd(usage, self.price), "usage"
        t.usd += cost or 0.0
        t.input_tokens += usage.input_tokens
        t.cache_read_tokens += usage.cache_read_tokens
        t.output_tokens += usage.output_tokens
        status = reply.status if reply is not None else 499
        if status != 200:
            t.upstream_errors += 1
        excess = cost - reserved if cost is not None and reserved is not None and cost > reserved + 1e-12 else None
        if excess is not None:
            log.warning("LLM gateway: a %s call cost $%.6f, $%.6f more than its reservation (usage %s)",
                        phase, cost, excess, usage.model_dump())
        error = reply.error if reply is not None else "cancelled before the reply came (the gateway stopped)"
        self._record(self._new_record(
            phase, endpoint, status, "forwarded", error=error, error_type=None if error is None else "upstream_error",
            request_chars=call.chars, forced=list(call.forced),
            reserved_usd=None if reserved is None else round(reserved, 10),
            cost_usd=None if cost is None else round(cost, 10), cost_basis=basis,
            excess_usd=None if excess is None else round(excess, 10), input_tokens=usage.input_tokens,
            cache_read_tokens=usage.cache_read_tokens, output_tokens=usage.output_tokens,
            duration_s=round(seconds, 4)))
