-- The list of events as a domain, like the other value lists in 0016_guards_cpu_per_action.sql
-- (which says why: a CHECK constraint's text is re-read by every statement that writes its table,
-- and this list was half of it for each audit entry; a domain's constraint is read once per
-- connection). Numbered after every migration that replaced the CHECK (0040 did, to add
-- `looked_up`), since on a new ledger migrations run in the order of their numbers.
--
-- The domain takes the values the CHECK accepts when this runs, whatever migration last wrote
-- them, so that it never drops an event a migration numbered before it added
-- (tests/it/roles.rs keeps them equal to Event::ALL). From here on an event is added by replacing
-- the domain's constraint: `ALTER DOMAIN actionledger_event DROP CONSTRAINT actionledger_event_known`,
-- then `ALTER DOMAIN actionledger_event ADD CONSTRAINT actionledger_event_known CHECK (VALUE IN (...))`.
--
-- As in 0016: the domain is created without its constraint, so that the column is relabelled in
-- place (no rewrite), then the constraint is added, which checks the existing entries once.
CREATE DOMAIN actionledger_event AS TEXT;

DO $$
DECLARE
    accepted TEXT;
BEGIN
    -- CHECK ((event = ANY (ARRAY['submitted'::text, ...]))), as the server writes it back.
    SELECT pg_get_constraintdef(oid) INTO STRICT accepted FROM pg_constraint
     WHERE conrelid = 'audit_trail'::regclass AND conname = 'audit_trail_event_known';
    ALTER TABLE audit_trail
        DROP CONSTRAINT audit_trail_event_known,
        ALTER COLUMN event TYPE actionledger_event;
    EXECUTE 'ALTER DOMAIN actionledger_event ADD CONSTRAINT actionledger_event_known '
        || regexp_replace(accepted, '^CHECK \(\(event = ', 'CHECK ((VALUE = ');
END;
$$;

-- The domain belongs to actionledger_owner like the tables (as in 0016).
DO $$
BEGIN
    IF to_regrole('actionledger_owner') IS NOT NULL AND pg_has_role('actionledger_owner', 'MEMBER') THEN
        ALTER DOMAIN actionledger_event OWNER TO actionledger_owner;
    END IF;
END;
$$;
