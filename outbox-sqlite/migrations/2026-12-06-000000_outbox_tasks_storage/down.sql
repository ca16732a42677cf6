-- Nothing to revert: the migration changes nothing on SQLite.
SELECT 1;
