"""Probe GET /health on one keep-alive connection until stdin closes; print ``ready`` after the
first answer, then the latencies (ms) as JSON. ``health_probe.py`` runs for a fixed time; this one runs exactly as long as an attack
does (the test closes the probe's stdin when the attack is over).

Run as a separate process, so its timings are not delayed by the test's own threads.
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
import time


def main(port: int, interval: float) -> None:
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    out, errors = [], 0
    while not done.is_set():
        t0 = time.perf_counter()
        try:
            conn.request("GET", "/health")
            r = conn.getresponse()
            ok = r.status == 200 and json.loads(r.read())["status"] == "ok"
        except (OSError, http.client.HTTPException, ValueError):
            ok = False
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        ms = (time.perf_counter() - t0) * 1000
        if ok:
            out.append(round(ms, 2))
            if len(out) == 1:
                print("ready", flush=True)  # the caller starts its attack now
        else:
            errors += 1
        done.wait(interval)
    print(json.dumps({"latencies_ms": out, "errors": errors}))


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]))
