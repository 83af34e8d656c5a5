"""A mail client process for the concurrency acceptance test.

    python mail_sender.py URL TOKEN SENDER RECIPIENT COUNT

Sends COUNT messages with bodies ``<sender>:<i>`` and idempotency keys ``<sender>-<i>`` one
after the other; every seventh send is retried with the same key, as a client that lost the
answer would. Prints one JSON line: the ids returned, in order.
"""

from __future__ import annotations

import json
import sys

import httpx

RETRY_EVERY = 7


def main() -> None:
    url, token, sender, recipient, count = sys.argv[1:6]
    ids: list[str] = []
    retried = 0
    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as client:
        for i in range(int(count)):
            body = {
                "to": recipient,
                "kind": "report",
                "body": f"{sender}:{i}",
                "idempotency_key": f"{sender}-{i}",
            }
            r = client.post("/v1/mail", json=body)
            r.raise_for_status()
            ids.append(r.json()["id"])
            if i % RETRY_EVERY == 0:
                again = client.post("/v1/mail", json=body)
                again.raise_for_status()
                if again.json()["id"] != ids[-1]:
                    sys.exit(f"retry of {sender}-{i} made a new message {again.json()['id']!r}")
                retried += 1
    print(json.dumps({"sender": sender, "ids": ids, "retried": retried}), flush=True)


if __name__ == "__main__":
    main()
