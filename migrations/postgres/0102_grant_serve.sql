-- `actionledger serve` submits (a worker's duty) and runs people's commands (a reviewer's) through
-- one login that is a member of both roles. A session holding both duties at once is not held to
-- either role's columns (0016's actionledger_session_duties), so serve never uses them together:
-- it opens one pool that acts as actionledger_worker and one that acts as actionledger_reviewer
-- (each connection starts with its `role` set), and the guards hold each to its own duty. The
-- people its reviewer tokens name sign the audit trail through that login, as person_logins lists.
--
-- actionledger_grant_serve gives a login all of that in one step, safe to run again (as the
-- tokens change): run it as a role that may grant the two roles (the one that created them, or one
-- with CREATEROLE) and write person_logins (the schema owner); `actionledger serve grant` calls it.
-- People no longer in the tokens keep their rows until the owner deletes them: a name may also be a
-- console login's person.
SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_temp', true);

CREATE FUNCTION actionledger_grant_serve(serve_login TEXT, people TEXT[]) RETURNS void LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
BEGIN
    IF to_regrole(quote_ident(serve_login)) IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'undefined_object', MESSAGE = format(
            'actionledger: there is no login %s; create it first (CREATE ROLE %I LOGIN PASSWORD ...)',
            serve_login, serve_login);
    END IF;
    IF to_regrole('actionledger_worker') IS NULL OR to_regrole('actionledger_reviewer') IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'undefined_object', MESSAGE =
            'actionledger: the ledger is not role-managed (the roles actionledger_worker and actionledger_reviewer '
            'do not exist), so a serve login needs no grant beyond the tables''';
    END IF;
    EXECUTE format('GRANT actionledger_worker, actionledger_reviewer TO %I', serve_login);
    INSERT INTO person_logins (login, person)
    SELECT serve_login, person FROM unnest(people) AS person
    ON CONFLICT DO NOTHING;
END;
$$;
