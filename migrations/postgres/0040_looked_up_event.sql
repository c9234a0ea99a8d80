-- A person's lookup of an action that is not unknown changes nothing but is kept: its audit entry
-- has an event of its own, which the list of events the database accepts (0011) must know.
ALTER TABLE audit_trail DROP CONSTRAINT audit_trail_event_known;
ALTER TABLE audit_trail
    ADD CONSTRAINT audit_trail_event_known CHECK (event IN (
        'submitted', 'payload_changed', 'claimed', 'completed', 'failed', 'retry_scheduled', 'outcome_unknown',
        'held', 'released', 'late_result', 'claim_recovered', 'lease_expired', 'lookup_found', 'lookup_not_found',
        'lookup_mismatch', 'retry', 'resolved_completed', 'resolved_not_written', 'cancelled', 'approved',
        'rejected', 'taken_over', 'assigned', 'late_results_acknowledged', 'looked_up'));
