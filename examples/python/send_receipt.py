"""Sends an order's receipt (a record at the CRM) once, however often and however it is run:
ACTIONLEDGER_URL=... ACTIONLEDGER_TOKEN=... CRM_URL=... python3 send_receipt.py ORDER_ID"""

import json, os, sys, urllib.error, urllib.request
from actionledger_register import Busy, NeedsPerson, NotWritten, Register

ledger = Register.from_env()


@ledger.performs(key=lambda order: f"shop:order:{order['id']}:send-receipt")
def send_receipt(order, claim):
    body = json.dumps({"external_ref": claim.key, "data": f"receipt for order {order['id']}"}).encode()
    request = urllib.request.Request(os.environ["CRM_URL"] + "/tasks", body, {"Content-Type": "application/json", **claim.headers()})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.load(answer)["id"]
    except urllib.error.HTTPError as refused:
        if refused.code in (429, 503):  # refused before writing: the ledger retries after a backoff
            raise NotWritten(f"the CRM answered {refused.code}", status=refused.code) from refused
        raise


if __name__ == "__main__":
    try:
        print(send_receipt({"id": sys.argv[1]}))
    except Busy as busy:  # another run holds the key, or a backoff runs: run again later
        sys.exit(print(busy, file=sys.stderr) or 75)
    except NeedsPerson as decided:  # unknown, conflict, held: a person decides, in the review console
        sys.exit(print(decided, file=sys.stderr) or 3)
