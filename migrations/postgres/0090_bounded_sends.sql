-- Every send counts towards the round's bound (rule 3), whatever settled the one before: a lookup
-- that proves nothing was written after the round's last send ends the action `failed` (known
-- not written, no send left), where before it went back to `pending` and started the count again.
INSERT INTO state_transitions (from_state, to_state, by_automation, by_people)
VALUES ('unknown', 'failed', true, true);

-- A lookup that got no answer is kept as evidence beside those that did, so that a person sees
-- every try, and the worker counts them towards their own bound.
ALTER TABLE lookups DROP CONSTRAINT lookups_verdict_check;
ALTER TABLE lookups ADD CONSTRAINT lookups_verdict_check
    CHECK (verdict IN ('found', 'not_found', 'mismatch', 'duplicates', 'failed'));
