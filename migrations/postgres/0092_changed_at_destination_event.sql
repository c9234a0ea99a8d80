-- A conditional update that the destination refuses (the record changed there since the ledger
-- last wrote it) goes from in_progress to conflict under an event of its own. The pair is one
-- automatic work already makes (a late result), so state_transitions is unchanged; the list of
-- events the database accepts (the domain of 0070) gains the new one.
ALTER DOMAIN actionledger_event DROP CONSTRAINT actionledger_event_known;
ALTER DOMAIN actionledger_event
    ADD CONSTRAINT actionledger_event_known CHECK (VALUE IN (
        'submitted', 'payload_changed', 'claimed', 'completed', 'failed', 'retry_scheduled', 'outcome_unknown',
        'held', 'released', 'late_result', 'claim_recovered', 'lease_expired', 'lookup_found', 'lookup_not_found',
        'lookup_mismatch', 'retry', 'resolved_completed', 'resolved_not_written', 'cancelled', 'approved',
        'rejected', 'taken_over', 'assigned', 'late_results_acknowledged', 'looked_up', 'changed_at_destination'));
