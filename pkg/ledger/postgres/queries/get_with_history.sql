-- Reads a run, whether the ingress claim created it (its claimed
-- event is the row: Get puts it first), whether its completion's event is the row (Get
-- puts it last), and the latest {maxHistory} stored events of its history, oldest
-- first, as a JSON array of ledger.Event, in one statement.
SELECT {runCols}, ingress_claim, completed_event, (
	SELECT coalesce(json_agg(json_build_object('at', e.at, 'kind', e.kind, 'attempt', e.attempt,
		'worker', e.worker, 'actor', e.actor, 'text', e.text) ORDER BY e.seq), '[]')
	FROM (SELECT * FROM {events} WHERE run_id = $1 ORDER BY seq DESC LIMIT {maxHistory}) e
) FROM {runs} WHERE run_id = $1
