-- Reviewed updates and derived idempotency keys (docs/RULES.md, "Changed payloads").
--
-- payload_revision counts the approved payloads of an action, from 1; every approval adds one.
-- idempotency_key is the key requests carry once an approval changed the payload after a request
-- may have been sent (KEY#rev-N); NULL means the action key itself.
-- updates_key and updates_destination_id name, on an update action (KEY#update-N), the completed
-- action it updates and that action's record at the destination (a plain reference, not a foreign
-- key, so that retention may settle the two actions' rows independently).
ALTER TABLE actions ADD COLUMN payload_revision INTEGER NOT NULL DEFAULT 1;
ALTER TABLE actions ADD COLUMN idempotency_key TEXT;
ALTER TABLE actions ADD COLUMN updates_key TEXT;
ALTER TABLE actions ADD COLUMN updates_destination_id TEXT;

-- Which idempotency key each attempt's request carried.
ALTER TABLE attempts ADD COLUMN idempotency_key TEXT;

-- The conflict pane also lists actions of any state whose proposed payload awaits a decision.
CREATE INDEX actions_proposed ON actions (id) WHERE proposed_payload IS NOT NULL;
