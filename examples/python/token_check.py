#!/usr/bin/env python3
"""Shows how a gateway with tokens answers the Python client.

    python3 token_check.py GATEWAY_URL COLLECTION TOKEN_A TOKEN_B

TOKEN_A and TOKEN_B are the tokens of two executors. It publishes a task,
takes its run with TOKEN_A and prints, one line each, what the gateway
answers to: no token, a wrong token, TOKEN_B completing TOKEN_A's run,
TOKEN_A completing it, and completing it again. Failures print as
"STATUS FIELD".
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from mscheduler_gateway import Gateway, GatewayError


def answer(call: Callable[[], Any]) -> str:
    """What a call returned, or the status and field of its GatewayError."""
    try:
        return str(call())
    except GatewayError as err:
        return f"{err.status} {err.field}"


def main(url: str, collection: str, token_a: str, token_b: str) -> None:
    a = Gateway(url, collection, token=token_a)
    b = Gateway(url, collection, token=token_b)
    print("publish:", a.publish("t-1", {"n": 1}))
    runs = a.take(max=4, wait_ms=10_000)
    print("take:", " ".join(f"{r.key}/attempt={r.attempt}/delivery={r.delivery}" for r in runs))
    run_id = runs[0].run_id
    print("no token:", answer(lambda: Gateway(url, collection).get("t-1")))
    print("wrong token:", answer(lambda: Gateway(url, collection, token="w" * 32).get("t-1")))
    print("renew by py-b: lost", answer(lambda: [lost["run_id"] == run_id for lost in b.renew([run_id])["lost"]]))
    print("complete by py-b:", answer(lambda: b.complete(run_id, {"by": "b"})))
    print("renew by py-a:", answer(lambda: a.renew([run_id])["renewed"] == [run_id]))
    print("complete by py-a:", answer(lambda: a.complete(run_id, {"by": "a"})))
    print("complete again:", answer(lambda: a.complete(run_id, {"by": "a"})))
    print("status:", a.get("t-1")["status"])


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
