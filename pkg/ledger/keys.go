package ledger

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
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

// RunIDLen is the length of a run ID: 64 lower-case hex digits (a SHA-256).
const RunIDLen = 64

// MinRunIDPrefix is the shortest prefix of a run ID that names a run (ListRunIDs,
// LookupRunID): 6 hex digits, 16.7 million values, so that a prefix a person copies
// from a table is unambiguous in any ledger of a reasonable size, and a lookup never
// walks a large part of the runs.
const MinRunIDPrefix = 6

// ValidRunID reports whether id looks like a run ID: 64 lower-case hex digits.
func ValidRunID(id string) bool {
	return len(id) == RunIDLen && isHex(id)
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ValidRunIDPrefix returns nil when p can name a run by the start of its ID: lower-case
// hex, MinRunIDPrefix to RunIDLen digits. Its error wraps ErrInvalid and says what a
// prefix must be.
func ValidRunIDPrefix(p string) error {
	switch {
	case !isHex(p):
		return fmt.Errorf("%w: run ID prefix %q is not lower-case hex digits (0-9, a-f)", ErrInvalid, p)
	case len(p) < MinRunIDPrefix:
		return fmt.Errorf("%w: run ID prefix %q is too short: give at least %d of the run ID's hex digits", ErrInvalid, p, MinRunIDPrefix)
	case len(p) > RunIDLen:
		return fmt.Errorf("%w: run ID prefix %q is longer than a run ID (%d hex digits)", ErrInvalid, p, RunIDLen)
	}
	return nil
}

// RunIDRange returns the bounds of the run IDs that start with prefix, lo inclusive and
// hi exclusive, as a range scan of a primary key over the IDs takes them: lo is prefix
// and hi is prefix+"g", since every digit of an ID sorts before "g" (in bytes, and in
// any collation that orders letters alphabetically after digits).
func RunIDRange(prefix string) (lo, hi string) { return prefix, prefix + "g" }
