-- operate (an operator's retry, cancel or release, decided in Go by the driver's rule):
-- ARGV id, the run as read (status, attempt, attempt_id, deadline, not_before,
-- attempts_made, updated_at, expire_at: ARGV[2..9]), the run to write (status,
-- attempt_id, deadline, not_before, attempts_made, last_error, updated_at, completed_at,
-- expire_at: ARGV[10..18]), grace (ms), the number of events n, n events (JSON), prefix.
-- It writes only when the run is still as read, and answers {1} when it wrote, {0} when
-- the run changed since (the caller reads it again and decides anew).

if not operate() then return {0} end
return {1}
