#!/usr/bin/env bash
# Sends an order's receipt (a record at the CRM) once, with curl and jq, as an automation
# platform's HTTP steps would: begin, act only when told to proceed, finish with what happened.
#   ACTIONLEDGER_URL=http://127.0.0.1:8080 ACTIONLEDGER_TOKEN=... CRM_URL=... ./register.sh ORDER_ID
# Exit 0 with the record's id (sent now, or before), 75 to try again later, 3 when a person decides.
set -euo pipefail
key="shop:order:$1:send-receipt"
ledger() { # VERB BODY: one request to the register for this key
    curl -sS --fail-with-body -H "Authorization: Bearer $ACTIONLEDGER_TOKEN" -H 'Content-Type: application/json' \
        -d "$2" "$ACTIONLEDGER_URL/v1/actions/$key:$1"
}

# 1. Begin: may I act on this key now?
answer=$(ledger begin "$(jq -nc --arg id "$1" '{payload: {order: $id}, lease_seconds: 60}')")
case $(jq -r .decision <<<"$answer") in
    proceed) ;;
    done) jq -r .destination_id <<<"$answer"; exit 0 ;; # performed before: skipped
    wait) echo "not now: $(jq -r .why <<<"$answer")" >&2; exit 75 ;;
    *) echo "a person decides: $(jq -r '.decision + ": " + (.why // .state)' <<<"$answer")" >&2; exit 3 ;;
esac
version=$(jq -r .claim.ownership_version <<<"$answer")

# 2. Act, sending the idempotency key the ledger answered.
if record=$(curl -sS --fail-with-body -m 10 -H 'Content-Type: application/json' \
    -H "Idempotency-Key: $(jq -r .claim.idempotency_key <<<"$answer")" \
    -d "$(jq -nc --arg ref "$key" '{external_ref: $ref, data: "receipt"}')" "$CRM_URL/tasks"); then
    # 3. Finish: completed, with the record's id (refused, 409, if the claim passed on meanwhile).
    id=$(jq -r .id <<<"$record")
    ledger finish "$(jq -nc --argjson v "$version" --arg id "$id" \
        '{ownership_version: $v, outcome: "completed", destination_id: $id}')" >/dev/null
    echo "$id"
else
    # A timeout or an error answer does not tell whether the CRM acted: unknown, never guessed.
    ledger finish "$(jq -nc --argjson v "$version" \
        '{ownership_version: $v, outcome: "unknown", reason: "the CRM request failed"}')" >/dev/null
    exit 1
fi
