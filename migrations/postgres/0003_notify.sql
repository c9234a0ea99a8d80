-- Review consoles LISTEN on this channel to refresh as soon as an action changes state or a
-- submission is refused. Identical notifications within one transaction are delivered once.
CREATE FUNCTION actionledger_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('actionledger_changes', '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER actions_notify_insert AFTER INSERT ON actions
    FOR EACH ROW EXECUTE FUNCTION actionledger_notify_change();
CREATE TRIGGER actions_notify_change AFTER UPDATE ON actions
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state
                       OR OLD.assignee IS DISTINCT FROM NEW.assignee
                       OR OLD.proposed_fingerprint IS DISTINCT FROM NEW.proposed_fingerprint)
    EXECUTE FUNCTION actionledger_notify_change();
CREATE TRIGGER refused_notify AFTER INSERT ON refused_submissions
    FOR EACH ROW EXECUTE FUNCTION actionledger_notify_change();
