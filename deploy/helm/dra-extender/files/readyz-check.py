# `helm test`: GET $READYZ_URL (/readyz through Service dra-extender-metrics) until it answers 200 or
# $READYZ_TIMEOUT_SECONDS pass; exit 0 if it did, 1 otherwise, printing each answer.
import os
import sys
import time
import urllib.error
import urllib.request

url = os.environ["READYZ_URL"]
deadline = time.monotonic() + float(os.environ.get("READYZ_TIMEOUT_SECONDS", "60"))
while True:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            print(f"{url}: {response.status} {response.read().decode(errors='replace').strip()}")
            sys.exit(0)
    except urllib.error.HTTPError as error:
        print(f"{url}: {error.code} {error.read().decode(errors='replace').strip()}", flush=True)
    except (urllib.error.URLError, OSError) as error:
        print(f"{url}: {error}", flush=True)
    if time.monotonic() >= deadline:
        print(f"{url} did not answer 200 in time", file=sys.stderr)
        sys.exit(1)
    time.sleep(2)
