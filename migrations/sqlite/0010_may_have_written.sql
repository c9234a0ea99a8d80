-- Rule 2: `failed` means known not written. An action remembers whether a request sent under it
-- may have written at the destination (an outcome that was unknown or a success, a late result
-- reporting a write, an attempt cut off by a crash) until a lookup or a person establishes that
-- nothing was written; while it does, exhausting attempts on errors before writing ends in
-- `unknown`, never `failed`.
ALTER TABLE actions ADD COLUMN may_have_written INTEGER NOT NULL DEFAULT 0 CHECK (may_have_written IN (0, 1));

-- Actions recorded before this column: any attempt that may have written counts.
UPDATE actions SET may_have_written = 1
 WHERE key IN (SELECT action_key FROM attempts
                WHERE outcome IS NULL OR outcome IN ('succeeded', 'unknown') OR destination_id IS NOT NULL);
