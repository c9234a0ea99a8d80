-- An approved new version of a completed action is taken on by that action only when its update
-- action (KEY#update-N) completes at the destination: the action then records `update_applied`,
-- its state unchanged. Until then it keeps the payload the destination was last known to hold, so
-- an update that fails leaves it as it was. No state changes, so state_transitions is unchanged;
-- the list of events the database accepts (the domain of 0070) gains the new one.
--
-- Writing the new payload onto the completed action is a worker's step (its update action's
-- result) or a person's (resolving the update action as completed). The column guards (0016, 0093)
-- let a worker change no approved payload: that permission is the column guards' to give, in the
-- migrations that own them.

ALTER DOMAIN actionledger_event DROP CONSTRAINT actionledger_event_known;
ALTER DOMAIN actionledger_event
    ADD CONSTRAINT actionledger_event_known CHECK (VALUE IN (
        'submitted', 'payload_changed', 'claimed', 'completed', 'failed', 'retry_scheduled', 'outcome_unknown',
        'held', 'released', 'late_result', 'claim_recovered', 'lease_expired', 'lookup_found', 'lookup_not_found',
        'lookup_mismatch', 'retry', 'resolved_completed', 'resolved_not_written', 'cancelled', 'approved',
        'rejected', 'taken_over', 'assigned', 'late_results_acknowledged', 'looked_up', 'changed_at_destination',
        'recreated', 'update_applied'));
