-- Counting an attempt (`start_attempt`) changes no indexed column, so PostgreSQL can write the new
-- row version beside the old one without a new entry in each of the table's indexes (a HOT
-- update), where the page has room:
--   * actions_unknown indexed `updated_at`, which every change sets, for a listing by time that no
--     statement makes (unknown actions are listed by the state index, actions_state);
--   * pages are filled to 85% on insert, leaving room for the next versions of their rows.
DROP INDEX actions_unknown;
ALTER TABLE actions SET (fillfactor = 85);
