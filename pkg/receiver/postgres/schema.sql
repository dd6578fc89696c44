CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.receiver_keys (
	key text PRIMARY KEY,
	fingerprint text NOT NULL,
	state text NOT NULL,
	token text NOT NULL,
	attempt bigint NOT NULL,
	lease_until timestamptz,
	status integer,
	header bytea,
	body bytea,
	body_omitted boolean NOT NULL DEFAULT false,
	created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL,
	expire_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS receiver_keys_by_expire_at ON {s}.receiver_keys (expire_at);
CREATE TABLE IF NOT EXISTS {s}.receiver_fences (
	run text PRIMARY KEY,
	attempt bigint NOT NULL,
	expire_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS receiver_fences_by_expire_at ON {s}.receiver_fences (expire_at);

-- receiver_claim is Store.Claim's rules (pkg/receiver/driver.DecideClaim) in PL/pgSQL,
-- one round trip: each statement of a VOLATILE function reads a fresh snapshot, and a
-- write that finds the row changed since it was read (a concurrent claim, takeover or
-- raised fence) decides again, so a claim never acts on a stale read. A claim that
-- writes nothing (a replay, a key in flight, a refusal) takes no lock.
CREATE OR REPLACE FUNCTION {s}.receiver_claim_v1(
	p_key text, p_fingerprint text, p_token text, p_lease_us bigint, p_retention_us bigint,
	p_run text, p_attempt bigint,
	OUT o_outcome text, OUT o_fence bigint, OUT o_lease_left_us bigint, OUT o_rec {s}.receiver_keys)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
	v_now timestamptz;
	v_fence bigint;
	v_fence_exp timestamptz;
	v_lease interval := p_lease_us * interval '1 microsecond';
	v_retention interval := p_retention_us * interval '1 microsecond';
	r {s}.receiver_keys;
	v_found boolean;
BEGIN
	LOOP
		v_now := date_trunc('microseconds', clock_timestamp());
		IF p_run IS NOT NULL THEN
			SELECT f.attempt, f.expire_at INTO v_fence, v_fence_exp FROM {s}.receiver_fences f WHERE f.run = p_run;
			IF NOT FOUND OR v_fence_exp <= v_now THEN
				v_fence := 0;
			END IF;
			IF v_fence > p_attempt THEN
				o_outcome := 'fenced';
				o_fence := v_fence;
				RETURN;
			END IF;
			IF v_fence < p_attempt THEN
				INSERT INTO {s}.receiver_fences AS f (run, attempt, expire_at) VALUES (p_run, p_attempt, v_now + v_retention)
				ON CONFLICT (run) DO UPDATE SET attempt = EXCLUDED.attempt, expire_at = EXCLUDED.expire_at
					WHERE f.attempt < EXCLUDED.attempt OR f.expire_at <= v_now;
				IF NOT FOUND THEN
					CONTINUE; -- raised by another request meanwhile: decide again
				END IF;
			END IF;
		END IF;
		IF p_key IS NULL THEN
			o_outcome := 'claimed';
			RETURN;
		END IF;

		SELECT * INTO r FROM {s}.receiver_keys k WHERE k.key = p_key;
		v_found := FOUND;
		IF v_found AND r.expire_at > v_now THEN
			IF r.fingerprint <> p_fingerprint THEN
				o_outcome := 'mismatch';
				o_rec := r;
				RETURN;
			END IF;
			IF r.state = 'completed' THEN
				o_outcome := 'completed';
				o_rec := r;
				RETURN;
			END IF;
			IF r.lease_until > v_now THEN
				o_outcome := 'in_flight';
				o_rec := r;
				o_lease_left_us := (extract(epoch FROM r.lease_until - v_now) * 1000000)::bigint;
				RETURN;
			END IF;
		END IF;
		IF v_found THEN
			-- An expired record, or a claim whose lease passed: take it over if it is
			-- still what was read.
			UPDATE {s}.receiver_keys k SET fingerprint = p_fingerprint, state = 'in_flight', token = p_token,
				attempt = COALESCE(p_attempt, 0), lease_until = v_now + v_lease, status = NULL, header = NULL,
				body = NULL, body_omitted = false, created_at = v_now, updated_at = v_now,
				expire_at = v_now + v_lease + v_retention
			WHERE k.key = p_key AND k.token = r.token AND k.updated_at = r.updated_at
			RETURNING k.* INTO r;
		ELSE
			INSERT INTO {s}.receiver_keys AS k (key, fingerprint, state, token, attempt, lease_until, body_omitted,
				created_at, updated_at, expire_at)
			VALUES (p_key, p_fingerprint, 'in_flight', p_token, COALESCE(p_attempt, 0), v_now + v_lease, false,
				v_now, v_now, v_now + v_lease + v_retention)
			ON CONFLICT (key) DO NOTHING
			RETURNING k.* INTO r;
		END IF;
		IF FOUND THEN
			o_outcome := 'claimed';
			o_rec := r;
			RETURN;
		END IF;
		-- Another request wrote the key meanwhile: decide again on what it wrote.
	END LOOP;
END
$fn$;
