#!/usr/bin/env python3
"""Publishes four resize tasks through an mscheduler gateway and serves them.

    python3 example.py [GATEWAY_URL [COLLECTION]]

The URL and collection default to $MSCHEDULER_GATEWAY_URL (else
http://127.0.0.1:8090) and $MSCHEDULER_COLLECTION; $MSCHEDULER_GATEWAY_TOKEN,
if set, is sent as the bearer token. The handler computes an area:

* resize-1 and resize-3 succeed at once;
* resize-2 fails its first attempt, and succeeds when the gateway retries it;
* resize-4 has width 0, which no retry can fix: it fails at once (NoRetry),
  and since it allows one failed run (max_failed_runs 1), the task fails.

Once every task has ended it prints one line per task, in key order:
key, status, attempts of the last run, and its result or error.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from mscheduler_gateway import ENDED, Gateway, NoRetry, Run

WIDTHS = {"resize-1": 10, "resize-2": 20, "resize-3": 30, "resize-4": 0}


def resize(run: Run) -> dict[str, int]:
    """The handler: {"area": width²} for a positive width."""
    width = run.params["width"]
    if width <= 0:
        raise NoRetry(f"width must be positive, got {width}")
    if run.key == "resize-2" and run.attempt == 1:
        raise RuntimeError("the image store timed out")  # retried, and the retry succeeds
    return {"area": width * width}


def wait_ended(gw: Gateway, keys: list[str], timeout: float = 90.0) -> dict[str, dict]:
    """Polls the tasks until each has ended; returns them by key."""
    deadline = time.monotonic() + timeout
    ended: dict[str, dict] = {}
    while len(ended) < len(keys):
        if time.monotonic() > deadline:
            raise TimeoutError(f"tasks not ended after {timeout}s: {sorted(set(keys) - set(ended))}")
        for key in keys:
            if key not in ended and (task := gw.get(key))["status"] in ENDED:
                ended[key] = task
        time.sleep(0.1)
    return ended


def describe(task: dict) -> str:
    """key, status, attempts and the result or error of the task's last run."""
    last = (task.get("runs") or [{}])[-1]
    outcome = json.dumps(last.get("result"), sort_keys=True) if task["status"] == "succeeded" else last.get("error", "")
    return f"{task['key']} {task['status']} attempts={last.get('attempts', 0)} {outcome}"


def main(argv: list[str]) -> int:
    url = argv[1] if len(argv) > 1 else os.environ.get("MSCHEDULER_GATEWAY_URL", "http://127.0.0.1:8090")
    collection = argv[2] if len(argv) > 2 else os.environ.get("MSCHEDULER_COLLECTION", "")
    if not collection:
        print("usage: example.py GATEWAY_URL COLLECTION (or set MSCHEDULER_COLLECTION)", file=sys.stderr)
        return 2
    gw = Gateway(url, collection, token=os.environ.get("MSCHEDULER_GATEWAY_TOKEN"), executor="python-example")

    gw.publish_many({"key": key, "params": {"width": width}, "retry_delay_ms": 100, "max_failed_runs": 1}
                    for key, width in WIDTHS.items())

    stop = threading.Event()
    server = threading.Thread(target=gw.serve, args=(resize,), kwargs={"concurrency": 2, "stop": stop, "wait_ms": 1000})
    server.start()
    try:
        tasks = wait_ended(gw, sorted(WIDTHS))
    finally:
        stop.set()
        server.join()
    for key in sorted(tasks):
        print(describe(tasks[key]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
