"""A client of actionledger's register, with Python's standard library only.

An automation that performs an effect itself (sends the e-mail, creates the CRM record) asks the
ledger before it acts, holds the claim while it acts, and reports what happened, so that the
effect happens once per key whatever repeats, crashes or pauses:

    ledger = Register.from_env()

    @ledger.performs(key=lambda order: f"shop:order:{order['id']}:send-receipt")
    def send_receipt(order, claim):
        ...  # the effect, sending claim.headers() to the destination
        return record_id

`send_receipt(order)` returns the destination's record id: from the effect when the ledger says
to proceed, or as recorded when the key completed before (the effect is skipped). It raises
`Busy` while another caller holds the key or a backoff runs (try later), and `NeedsPerson` when
a person decides (an outcome that is unknown, a conflict, a claim that passed on). An effect
raises `NotWritten` when it knows the destination did not act; any other exception from it is
reported as an unknown outcome (the destination may have acted) and raised again.

Copy this file next to your automation; nothing else is needed.
"""

import functools
import json
import os
import threading
import urllib.error
import urllib.parse
import urllib.request


class NotWritten(Exception):
    """The destination did not act. `permanent`: trying again cannot help (invalid data,
    permission denied); otherwise the ledger runs it again after a backoff while attempts last."""

    def __init__(self, reason, permanent=False, retry_after_seconds=None, status=None):
        super().__init__(reason)
        self.reason = reason
        self.permanent = permanent
        self.retry_after_seconds = retry_after_seconds
        self.status = status


class Busy(Exception):
    """Not now: another caller holds the key, a backoff runs, or it waits for another action."""

    def __init__(self, answer):
        super().__init__(f"{answer['key']}: {answer['why']} (until {answer['until']})")
        self.answer = answer


class NeedsPerson(Exception):
    """A person decides: the outcome is unknown, conflicts, failed, is held or cancelled, or this
    caller's claim passed on while it acted (its report is kept for review)."""

    def __init__(self, decision, detail, answer=None):
        super().__init__(f"{decision}: {detail}")
        self.decision = decision
        self.answer = answer


class LedgerError(Exception):
    """The ledger refused a request (a bad token, a malformed body) or could not be reached."""

    def __init__(self, status, problem):
        super().__init__(f"HTTP {status}: {problem.get('detail', problem)}")
        self.status = status
        self.problem = problem


class Claim:
    """The claim held while acting: send `headers()` with the request to the destination."""

    def __init__(self, key, claim):
        self.key = key
        self.ownership_version = claim["ownership_version"]
        self.attempt = claim["attempt"]
        self.lease_until = claim["lease_until"]
        self.idempotency_key = claim["idempotency_key"]
        self.idempotency_header = claim["idempotency_header"]
        self.fencing_header = claim["fencing_header"]

    def headers(self):
        """The idempotency key and the fencing token, in the headers the executor declares."""
        sent = {}
        if self.idempotency_header:
            sent[self.idempotency_header] = self.idempotency_key
        if self.fencing_header:
            sent[self.fencing_header] = str(self.ownership_version)
        return sent


class Register:
    """actionledger's register at `base_url` (e.g. http://127.0.0.1:8080), with an
    `executor:DESTINATION` token."""

    def __init__(self, base_url, token, lease_seconds=60, timeout=30):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.lease_seconds = lease_seconds
        self.timeout = timeout

    @classmethod
    def from_env(cls):
        """From ACTIONLEDGER_URL, ACTIONLEDGER_TOKEN and, optionally, ACTIONLEDGER_LEASE_SECONDS."""
        return cls(
            os.environ["ACTIONLEDGER_URL"],
            os.environ["ACTIONLEDGER_TOKEN"],
            lease_seconds=int(os.environ.get("ACTIONLEDGER_LEASE_SECONDS", "60")),
        )

    def _post(self, path, body):
        request = urllib.request.Request(
            self.base_url + path,
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                return answer.status, json.load(answer)
        except urllib.error.HTTPError as refused:
            try:
                problem = json.load(refused)
            except ValueError:
                problem = {"detail": refused.reason}
            return refused.code, problem

    def _on_key(self, key, verb, body):
        # Colons stay (keys hold them; the verb follows the last one); `/` and `#` are escaped.
        return self._post(f"/v1/actions/{urllib.parse.quote(key, safe=':')}:{verb}", body)

    def begin(self, key, payload, event_id=None, source_version=None):
        """Records the intent and asks whether to act: the answer's `decision` is proceed, done,
        wait, review, cancelled, stale or conflict."""
        body = {"payload": payload, "lease_seconds": self.lease_seconds}
        if event_id is not None:
            body["event_id"] = event_id
        if source_version is not None:
            body["source_version"] = source_version
        status, answer = self._on_key(key, "begin", body)
        if status != 200:
            raise LedgerError(status, answer)
        return answer

    def heartbeat(self, claim):
        """Extends the claim's lease; False once the claim has passed on (stop acting)."""
        status, answer = self._on_key(
            claim.key, "heartbeat", {"ownership_version": claim.ownership_version, "lease_seconds": self.lease_seconds}
        )
        if status == 409:
            return False
        if status != 200:
            raise LedgerError(status, answer)
        return True

    def finish(self, claim, outcome, **fields):
        """Reports what happened under the claim: completed (destination_id=...), not_written
        (reason=..., permanent=...) or unknown (reason=...)."""
        body = {"ownership_version": claim.ownership_version, "outcome": outcome}
        body.update({name: value for name, value in fields.items() if value is not None})
        status, answer = self._on_key(claim.key, "finish", body)
        if status == 409:
            raise NeedsPerson("late", answer.get("detail", "the claim passed on"), answer)
        if status != 200:
            raise LedgerError(status, answer)
        return answer

    def performs(self, key, event_id=None):
        """Decorates `effect(payload, claim)`, which performs the effect and returns the
        destination's record id: called only when the ledger says to proceed, with the lease kept
        alive meanwhile. `key(payload)` builds the action key (and `event_id(payload)` the
        delivery's id, where the caller has one)."""

        def decorate(effect):
            @functools.wraps(effect)
            def run(payload, *args, **kwargs):
                action_key = key(payload)
                answer = self.begin(action_key, payload, event_id=event_id(payload) if event_id else None)
                decision = answer["decision"]
                if decision == "done":
                    return answer["destination_id"]
                if decision == "wait":
                    raise Busy(answer)
                if decision != "proceed":
                    raise NeedsPerson(decision, answer["why"] or answer["state"], answer)
                claim = Claim(action_key, answer["claim"])
                stop = threading.Event()
                beat = threading.Thread(target=self._keep, args=(claim, stop), daemon=True)
                beat.start()
                try:
                    destination_id = effect(payload, claim, *args, **kwargs)
                except NotWritten as known:
                    stop.set()
                    evidence = {"status": known.status} if known.status is not None else None
                    self.finish(
                        claim,
                        "not_written",
                        reason=known.reason,
                        permanent=known.permanent,
                        retry_after_seconds=known.retry_after_seconds,
                        evidence=evidence,
                    )
                    raise
                except BaseException as unsure:
                    # A timeout or a broken connection does not tell whether the destination
                    # acted: the ledger keeps it unknown for a person, never guessing.
                    stop.set()
                    self.finish(claim, "unknown", reason=f"{type(unsure).__name__}: {unsure}"[:4096])
                    raise
                stop.set()
                beat.join()
                self.finish(claim, "completed", destination_id=str(destination_id))
                return destination_id

            return run

        return decorate

    def _keep(self, claim, stop):
        # Renews at a third of the lease, so that two missed beats still leave time.
        while not stop.wait(self.lease_seconds / 3):
            try:
                if not self.heartbeat(claim):
                    return
            except (OSError, LedgerError):
                continue
