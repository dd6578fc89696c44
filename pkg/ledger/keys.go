package ledger

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"time"
)

// Hash returns the hex SHA-256 of parts with each part length-prefixed, so that no two
// different lists of parts hash alike ("ab","c" and "a","bc" differ).
func Hash(parts ...string) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Identity kinds mixed into run IDs, so that a scheduler run and a caller key can never
// produce the same ID.
const (
	kindSchedule = "schedule"
	kindKey      = "key"
)

// ScheduledRunID is the run ID of a scheduler call: namespace, job (the path's handler),
// the scheduler's job name and the UTC schedule time.
func ScheduledRunID(namespace, job, schedulerJob string, scheduleTime time.Time) string {
	return Hash("runonce/v1", namespace, job, kindSchedule, schedulerJob,
		scheduleTime.UTC().Format(time.RFC3339Nano))
}

// KeyedRunID is the run ID of a call identified by an Idempotency-Key or job_key.
func KeyedRunID(namespace, job, key string) string {
	return Hash("runonce/v1", namespace, job, kindKey, key)
}

// EffectKey is the key of a run's effect: stable across every attempt of the run, and
// the Idempotency-Key passed downstream.
func EffectKey(runID, name string) string {
	return Hash("runonce/v1/effect", runID, name)
}

// PayloadHash is the hex SHA-256 of a payload.
func PayloadHash(payload []byte) string {
	sum := sha256.Sum256(payload)
	return hex.EncodeToString(sum[:])
}

// ValidRunID reports whether id looks like a run ID: 64 lower-case hex digits.
func ValidRunID(id string) bool {
	if len(id) != 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
