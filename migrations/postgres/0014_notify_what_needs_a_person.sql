-- Consoles are told at once (LISTEN/NOTIFY) when an action comes to need a person or stops
-- needing one, changes assignee, gets or loses a proposal or a late result, and when a
-- submission is refused; the routine steps of a worker (claim, completion, a retry scheduled) and
-- new pending actions show at the console's next refresh (every 2 s by default).
--
-- Why not every change: PostgreSQL serialises the commits of transactions that notified (each
-- holds a lock from before its commit until the commit ends, so that notifications are queued in
-- commit order), so such commits no longer share their disk flushes. Notifying on every claim
-- and result made the worker's per-action path commit one transaction at a time
-- (docs/BENCHMARKS.md, "The drain").
DROP TRIGGER actions_notify_insert ON actions;
DROP TRIGGER actions_notify_change ON actions;
CREATE TRIGGER actions_notify_change AFTER UPDATE ON actions
    FOR EACH ROW WHEN ((OLD.state IS DISTINCT FROM NEW.state
                        AND (OLD.state IN ('failed', 'unknown', 'conflict', 'held')
                             OR NEW.state IN ('failed', 'unknown', 'conflict', 'held')))
                       OR OLD.assignee IS DISTINCT FROM NEW.assignee
                       OR OLD.proposed_fingerprint IS DISTINCT FROM NEW.proposed_fingerprint
                       OR OLD.late_results IS DISTINCT FROM NEW.late_results)
    EXECUTE FUNCTION actionledger_notify_change();
