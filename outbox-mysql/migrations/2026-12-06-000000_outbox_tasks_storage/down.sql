-- Nothing to revert: the migration changes nothing on MySQL and MariaDB.
DO 0;
