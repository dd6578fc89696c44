-- ListRunIDs's statement: a range of the primary key, in the column's
-- own collation (the PK's), which holds the IDs (TestListRunIDsReadsThePrimaryKey).
SELECT run_id FROM {runs} WHERE run_id >= $1 AND run_id < $2 ORDER BY run_id LIMIT $3
