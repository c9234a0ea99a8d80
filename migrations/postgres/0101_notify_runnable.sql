-- Idle workers LISTEN on `actionledger_runnable` and claim at once when it is notified, instead of
-- at their next poll (`poll_interval`, 250 ms by default). The payload is the ledger's schema, so
-- that the workers of another ledger in the same database ignore it.
--
-- It is notified only where work becomes claimable now, never on a claim or a result: every
-- claim and completion notified the consoles' channel (0003) and made the worker's commits take
-- turns (0014), and a channel that every worker's commit notified would also wake every idle
-- worker for each of them, to claim nothing.
--
-- * A statement that inserts actions, once, if any new action is claimable now: pending, nothing
--   proposed, no backoff, and not waiting (`after`) for an action that has not completed. Once per
--   statement, and PostgreSQL sends identical notifications of one transaction once: a page of
--   submissions in one commit wakes the workers once.
-- * An update that makes an action claimable now that was not before: into `pending` from another
--   state (a claim given back, a person's retry, a resolution as not written, a lookup that found
--   nothing, a rejected proposal), or a pending action whose proposal or backoff is lifted. Not a
--   retry that waits out a backoff: nothing is claimable until it ends, and polling finds it
--   then. The backoff is measured against the time of the write (`updated_at`), the time the
--   ledger decided it by, so the trigger reads no clock.
--
-- Not when an action completes, although the actions waiting for it (`after`) become claimable:
-- completions are the commonest commit of all, and notifying on each would make them take turns
-- again (0014). Telling only those with a waiting action apart would look up `after_key`, which no
-- index serves. The worker that records a completion claims again as soon as it has (its task
-- ending ends its pause), so the waiting action is its next claim without any notification; an
-- action completed by a person's command is found by polling.
--
-- The cost falls on the submissions: a transaction that notifies takes a database-wide lock at
-- its commit (0014), so concurrent submissions commit one after another (docs/BENCHMARKS.md,
-- "The default worker: one pipeline"). No privilege is needed: pg_notify is open to every role,
-- and LISTEN too.

SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_temp', true);

CREATE FUNCTION actionledger_notify_runnable_inserted()
RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $function$
BEGIN
    IF EXISTS (SELECT 1 FROM inserted_actions n
               WHERE n.state = 'pending' AND n.proposed_payload IS NULL
                 AND (n.not_before IS NULL OR n.not_before <= n.updated_at)
                 AND (n.after_key IS NULL
                      OR EXISTS (SELECT 1 FROM actions p WHERE p.key = n.after_key AND p.state = 'completed'))) THEN
        PERFORM pg_notify('actionledger_runnable', TG_TABLE_SCHEMA);
    END IF;
    RETURN NULL;
END;
$function$;

CREATE FUNCTION actionledger_notify_runnable()
RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $function$
BEGIN
    PERFORM pg_notify('actionledger_runnable', TG_TABLE_SCHEMA);
    RETURN NULL;
END;
$function$;

CREATE TRIGGER actions_notify_runnable_inserted AFTER INSERT ON actions
    REFERENCING NEW TABLE AS inserted_actions
    FOR EACH STATEMENT EXECUTE FUNCTION actionledger_notify_runnable_inserted();

-- The condition is the trigger's WHEN, so that the claims and results it does not concern queue
-- nothing to run after their statement.
CREATE TRIGGER actions_notify_runnable AFTER UPDATE ON actions
    FOR EACH ROW WHEN (NEW.state = 'pending' AND NEW.proposed_payload IS NULL
                       AND (NEW.not_before IS NULL OR NEW.not_before <= NEW.updated_at)
                       AND NOT (OLD.state = 'pending' AND OLD.proposed_payload IS NULL
                                AND (OLD.not_before IS NULL OR OLD.not_before <= NEW.updated_at)))
    EXECUTE FUNCTION actionledger_notify_runnable();

-- The new functions belong to actionledger_owner like the others, where this session may hand
-- them over.
DO $$
BEGIN
    IF to_regrole('actionledger_owner') IS NOT NULL AND pg_has_role('actionledger_owner', 'MEMBER') THEN
        ALTER FUNCTION actionledger_notify_runnable_inserted() OWNER TO actionledger_owner;
        ALTER FUNCTION actionledger_notify_runnable() OWNER TO actionledger_owner;
    END IF;
END;
$$;
