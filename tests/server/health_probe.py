"""Probe GET /health on one keep-alive connection for a while; print the latencies (ms) as JSON.

Run as a separate process by the load test, so its timings are not delayed by the load
generator's own event loop.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import time


def main(port: int, seconds: float, interval: float) -> None:
    try:
        os.nice(-5)  # measure the service, not this prober waiting for a CPU (where permitted)
    except OSError:
        pass
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    out, errors = [], 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        try:
            conn.request("GET", "/health")
            r = conn.getresponse()
            body = r.read()
            ok = r.status == 200 and json.loads(body)["status"] == "ok"
        except (OSError, http.client.HTTPException, ValueError):
            ok = False
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        ms = (time.perf_counter() - t0) * 1000
        if ok:
            out.append(round(ms, 2))
        else:
            errors += 1
        time.sleep(interval)
    print(json.dumps({"latencies_ms": out, "errors": errors}))


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]))
