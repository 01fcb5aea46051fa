"""A client for the mscheduler HTTP gateway (package worker/gateway).

Standard library only. A :class:`Gateway` speaks for one executor on one task
collection: it publishes, reads, lists and cancels tasks, and takes, renews
and ends runs. :meth:`Gateway.serve` runs a handler on the runs it takes,
renewing them meanwhile::

    gw = Gateway("http://127.0.0.1:8090", "emails", executor="mailer-1")
    gw.publish("welcome-ada", {"to": "ada@example.com"})
    gw.serve(lambda run: send(run.params), concurrency=4, stop=stop_event)

Without tokens the gateway serves this machine only, and the executor names
itself: ``executor`` (stable across restarts) and ``groups``. With tokens,
pass ``token``: the gateway decides the executor and its groups.

Every take carries :data:`SESSION`, drawn once per process: an executor that
restarts and takes again gets back at once the runs it still held.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

__all__ = ["ENDED", "SESSION", "Gateway", "GatewayError", "NoRetry", "Run"]

SESSION: str = str(uuid.uuid4())
"""This process's session id, sent with every take."""

ENDED = frozenset({"succeeded", "failed", "finished", "cancelled", "invalid"})
"""Task statuses after which nothing more runs."""

log = logging.getLogger(__name__)


class GatewayError(Exception):
    """An answer other than success: its HTTP status, the request field it
    is about ("" when none) and the gateway's message."""

    def __init__(self, status: int, message: str, field: str = "") -> None:
        super().__init__(f"{status}: {message}" + (f" (field {field})" if field else ""))
        self.status = status
        self.message = message
        self.field = field


class NoRetry(Exception):
    """Raised by a handler, fails its run at once, without local retries."""


@dataclass(frozen=True)
class Run:
    """A run handed to this executor: renew it every ``renew_every_ms``, and
    end it (complete, fail or release) within ``lease_ms`` of the last
    renewal. ``attempt`` counts local retries, from 1; ``delivery`` counts
    the times the run was handed out (more than 1 after a restart);
    ``planned_at`` is the planned time of the occurrence, for a task with a
    plan (an RFC 3339 text), else None."""

    run_id: str
    key: str
    attempt: int
    delivery: int
    params: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    lease_ms: int = 0
    renew_every_ms: int = 0
    planned_at: Optional[str] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Run":
        return cls(run_id=d["run_id"], key=d["key"], attempt=d.get("attempt", 1), delivery=d.get("delivery", 1),
                   params=d.get("params"), headers=d.get("headers") or {},
                   lease_ms=d.get("lease_ms", 0), renew_every_ms=d.get("renew_every_ms", 0),
                   planned_at=d.get("planned_at"))


def _is_loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    return host == "localhost" or host == "::1" or host.startswith("127.")


class Gateway:
    """A client of a gateway's collection, for one executor.

    ``executor`` defaults to this host's short name and "-python"; it is
    used (with ``groups``) only without ``token``. Give each process running
    at once an id (or token) of its own, kept across its restarts: the
    gateway hands a take with a new session every run its executor holds.
    ``timeout`` bounds each call in seconds, besides the wait of a take.
    """

    def __init__(self, base_url: str, collection: str, token: Optional[str] = None,
                 executor: Optional[str] = None, groups: Optional[Sequence[str]] = None,
                 timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.collection = collection
        self.token = token
        self.executor = executor or socket.gethostname().split(".")[0] + "-python"
        self.groups = list(groups) if groups else None
        self.timeout = timeout
        self._url = f"{self.base_url}/v1/collections/{urllib.parse.quote(collection, safe='')}"
        # A gateway on this machine is reached directly, whatever the proxy settings.
        handlers = [urllib.request.ProxyHandler({})] if _is_loopback(self.base_url) else []
        self._opener = urllib.request.build_opener(*handlers)

    # -- tasks ---------------------------------------------------------------

    def publish(self, key: str, params: Any = None, **options: Any) -> str:
        """Publishes one task; ``options`` are the JSON fields of a task
        (priority, group, max_retries, retry_delay_ms, max_failed_runs, ...).
        Returns the outcome: "inserted", "updated" or "unchanged"."""
        task = dict(options, key=key)
        if params is not None:
            task["params"] = params
        return self._call("POST", "/tasks", task)["results"][0]["outcome"]

    def publish_many(self, tasks: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
        """Publishes tasks (dicts with "key", "params", options) at once;
        returns their {"key", "outcome"}, in order."""
        return self._call("POST", "/tasks", {"tasks": [dict(t) for t in tasks]})["results"]

    def get(self, key: str) -> dict[str, Any]:
        """The task of a key: status, counts, params and its last runs."""
        return self._call("GET", "/tasks/" + urllib.parse.quote(key, safe=""))

    def list(self, status: Union[str, Iterable[str], None] = None, limit: Optional[int] = None,
             after: Optional[str] = None) -> list[dict[str, Any]]:
        """Tasks in key order, of one status or any of several, from the key
        after ``after``; at most ``limit`` (up to 1000)."""
        query: list[tuple[str, Any]] = []
        if status is not None:
            query += [("status", s) for s in ([status] if isinstance(status, str) else status)]
        if limit is not None:
            query.append(("limit", limit))
        if after is not None:
            query.append(("after", after))
        path = "/tasks" + ("?" + urllib.parse.urlencode(query) if query else "")
        return self._call("GET", path)["tasks"]

    def cancel(self, key: str) -> dict[str, Any]:
        """Cancels a task; GatewayError 409 if it has ended already."""
        return self._call("POST", "/tasks/" + urllib.parse.quote(key, safe="") + "/cancel", {})

    # -- runs ----------------------------------------------------------------

    def take(self, max: int = 1, wait_ms: int = 0) -> list[Run]:
        """Takes up to ``max`` runs, waiting up to ``wait_ms`` for the first."""
        body = dict(self._me(groups=True), session=SESSION, max=max, wait_ms=wait_ms)
        out = self._call("POST", "/take", body, timeout=self.timeout + wait_ms / 1000)
        return [Run.from_json(r) for r in out["runs"]]

    def renew(self, run_ids: Sequence[str]) -> dict[str, Any]:
        """Renews runs in one call: {"renewed": [ids], "lost": [{"run_id",
        "reason"}]}; lost runs have ended, and their outcome is not wanted."""
        return self._call("POST", "/renew", dict(self._me(), run_ids=list(run_ids)), accept=(409,))

    def complete(self, run_id: str, result: Any = None, attempt: Optional[int] = None) -> str:
        """Completes a run with a JSON result (none when None). Returns the
        outcome: "succeeded", or "pending" if its write is still going on.
        With ``attempt`` (the run's), a run retried since is not ended."""
        body = self._end(run_id, attempt)
        if result is not None:
            body["result"] = result
        return self._call("POST", "/complete", body)["outcome"]

    def fail(self, run_id: str, error: str, retry: bool = True, attempt: Optional[int] = None) -> str:
        """Fails a run; with retry, the gateway retries it locally while the
        task's retries last. Returns "retrying", "failed" or "pending"."""
        body = dict(self._end(run_id, attempt), error=error, retry=retry)
        return self._call("POST", "/fail", body)["outcome"]

    def release(self, run_id: str, attempt: Optional[int] = None) -> str:
        """Gives a run back unrun, for any executor to take; "released"."""
        return self._call("POST", "/release", self._end(run_id, attempt))["outcome"]

    def _end(self, run_id: str, attempt: Optional[int]) -> dict[str, Any]:
        """The body of an end request: the executor, the run and its attempt."""
        body = dict(self._me(), run_id=run_id)
        if attempt is not None:
            body["attempt"] = attempt
        return body

    def _me(self, groups: bool = False) -> dict[str, Any]:
        """The executor's fields of a run request: none with a token."""
        if self.token:
            return {}
        me: dict[str, Any] = {"executor": self.executor}
        if groups and self.groups:
            me["groups"] = self.groups
        return me

    def _call(self, method: str, path: str, body: Any = None, timeout: Optional[float] = None,
              accept: Sequence[int] = ()) -> Any:
        """Sends a JSON request; returns the decoded answer of a success (or
        of a status in ``accept``), raises GatewayError otherwise."""
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        req = urllib.request.Request(self._url + path, data=data, headers=headers, method=method)
        try:
            with self._opener.open(req, timeout=timeout or self.timeout) as resp:
                return json.load(resp)
        except urllib.error.HTTPError as err:
            with err:
                raw = err.read()
            try:
                payload = json.loads(raw)
            except ValueError:
                payload = None
            if not isinstance(payload, dict):
                raise GatewayError(err.code, raw.decode(errors="replace").strip() or str(err.reason)) from None
            if err.code in accept:
                return payload
            raise GatewayError(err.code, payload.get("error", ""), payload.get("field", "")) from None

    # -- serving -------------------------------------------------------------

    def serve(self, handler: Callable[[Run], Any], concurrency: int = 1,
              stop: Optional[threading.Event] = None, wait_ms: int = 10_000) -> None:
        """Runs ``handler(run)`` on the runs it takes, up to ``concurrency``
        at once, each in a thread, until ``stop`` is set; then it finishes
        the runs it holds and returns. A run is completed with the handler's
        return value (JSON), or failed with the text of its exception (at
        once for :class:`NoRetry`, and for a result the gateway refuses: not
        JSON, or over its MaxResultBytes). The runs held are renewed together, one
        call, every (shortest) ``renew_every_ms``. A take waits up to
        ``wait_ms`` for work, a second at a time, so that ``serve`` returns
        within about a second of ``stop`` when idle (a take cut short would
        leave runs the gateway handed over unrun). The runs handed back after
        a restart are all run, even beyond ``concurrency``."""
        _Serving(self, handler, concurrency).run(stop or threading.Event(), wait_ms)


# STOP_SLICE_MS bounds each take of serve, and so how long stop waits for
# an idle serve to return.
STOP_SLICE_MS = 1000


class _Serving:
    """The state of one Gateway.serve: the runs whose handlers run."""

    def __init__(self, gw: Gateway, handler: Callable[[Run], Any], concurrency: int) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.gw, self.handler, self.concurrency = gw, handler, concurrency
        self.cond = threading.Condition()
        self.running: list[Run] = []  # by identity: a retried run comes back with its id
        self.lost: set[str] = set()  # ids the gateway no longer holds for us
        self.done = False

    def run(self, stop: threading.Event, wait_ms: int) -> None:
        renewer = threading.Thread(target=self._renew, name="mscheduler-renew", daemon=True)
        renewer.start()
        try:
            while not stop.is_set():
                with self.cond:
                    self.cond.wait_for(lambda: len(self.running) < self.concurrency)
                    free = self.concurrency - len(self.running)
                try:
                    runs = self.gw.take(max=free, wait_ms=min(wait_ms, STOP_SLICE_MS))
                except (GatewayError, OSError) as exc:
                    log.warning("take: %s", exc)
                    stop.wait(1.0)
                    continue
                for run in runs:
                    with self.cond:
                        self.running.append(run)
                        self.cond.notify_all()
                    threading.Thread(target=self._execute, args=(run,), name="run-" + run.key).start()
        finally:
            with self.cond:
                self.cond.wait_for(lambda: not self.running)
                self.done = True
                self.cond.notify_all()
            renewer.join()

    def _execute(self, run: Run) -> None:
        try:
            try:
                result = self.handler(run)
            except NoRetry as exc:
                outcome = self.gw.fail(run.run_id, _text(exc), retry=False, attempt=run.attempt)
            except Exception as exc:  # the handler's failure is the run's
                outcome = self.gw.fail(run.run_id, _text(exc), attempt=run.attempt)
            else:
                try:
                    outcome = self.gw.complete(run.run_id, result, attempt=run.attempt)
                except (TypeError, ValueError) as exc:  # json.dumps refused the result
                    outcome = self.gw.fail(run.run_id, f"the result is not JSON: {exc}", retry=False, attempt=run.attempt)
                except GatewayError as exc:
                    if exc.status != 400 or exc.field != "result":
                        raise
                    # Refused without a write (over MaxResultBytes): the run is
                    # still ours, and running it again gives the same result.
                    outcome = self.gw.fail(run.run_id, f"the gateway refused the result: {exc.message}", retry=False, attempt=run.attempt)
            log.debug("run %s of %s: %s", run.run_id, run.key, outcome)
        except (GatewayError, OSError) as exc:
            log.warning("run %s of %s: its end was not recorded: %s", run.run_id, run.key, exc)
        finally:
            with self.cond:
                self.running.remove(run)
                self.lost.discard(run.run_id)
                self.cond.notify_all()

    def _renew(self) -> None:
        last = time.monotonic()
        with self.cond:
            while not self.done:
                held = [r for r in self.running if r.run_id not in self.lost]
                if not held:
                    self.cond.wait()
                    last = time.monotonic()
                    continue
                due = last + max(min(r.renew_every_ms for r in held), 50) / 1000
                if time.monotonic() < due:
                    self.cond.wait(due - time.monotonic())
                    continue
                ids = sorted({r.run_id for r in held})
                self.cond.release()
                try:
                    out = self.gw.renew(ids)
                except (GatewayError, OSError) as exc:
                    log.warning("renew: %s", exc)
                    out = {}
                finally:
                    self.cond.acquire()
                last = time.monotonic()
                still = {r.run_id for r in self.running}  # not those that ended meanwhile
                for lost in out.get("lost") or []:
                    if lost["run_id"] in still:
                        log.warning("run %s lost: %s", lost["run_id"], lost["reason"])
                        self.lost.add(lost["run_id"])


def _text(exc: BaseException) -> str:
    """The error of a failed run: the exception's text, or its type's name."""
    return str(exc) or type(exc).__name__
