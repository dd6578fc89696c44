-- The start of List's statement: every column of a run but its payload.
-- List adds the WHERE, ORDER BY and LIMIT its filters need.
SELECT {listRunCols} FROM {runs}
