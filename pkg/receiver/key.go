package receiver

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// The request headers the receiver reads.
const (
	// HeaderIdempotencyKey carries the client's key (the IETF draft's field).
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderRunID and HeaderAttempt are the run and attempt runonce's worker sends with
	// every call of an HTTP target; the receiver fences on them when
	// Options.TrustRunHeaders says the request is authenticated.
	HeaderRunID   = "X-Runonce-Run-Id"
	HeaderAttempt = "X-Runonce-Attempt"
)

// MaxKeyLength is the longest Idempotency-Key accepted, in bytes.
const MaxKeyLength = 255

// hash is the hex SHA-256 of parts, each length-prefixed so that no two lists of parts
// hash alike.
func hash(parts ...string) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ScopedKey is the store's key of an Idempotency-Key: a hash of the tenant, the method,
// the path and the key, so that the same key sent by two tenants, or to two routes, names
// two records, and no client's key is stored in the clear.
func ScopedKey(tenant, method, path, key string) string {
	return hash("runonce/receiver/v1/key", tenant, method, path, key)
}

// ScopedRun is the store's key of a run's fence: a hash of the tenant and the run ID, so
// that a tenant cannot fence another's runs.
func ScopedRun(tenant, runID string) string {
	return hash("runonce/receiver/v1/run", tenant, runID)
}

// Fingerprint identifies a request's content: its query string and body. A key reused
// with another fingerprint is refused (422).
func Fingerprint(rawQuery string, body []byte) string {
	return hash("runonce/receiver/v1/request", rawQuery, string(body))
}

// ValidScoped reports whether s is a scoped key or run: 64 lower-case hex digits.
func ValidScoped(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// errMalformedKey is why an Idempotency-Key was refused; its text is the problem's
// detail.
var errMalformedKey = errors.New("malformed Idempotency-Key")

// parseKey returns the request's Idempotency-Key, "" when it has none. The draft makes
// the field a Structured Field String (RFC 8941 §3.3.3: "…" with \" and \\ escapes);
// runonce's worker, like most clients, sends the bare token. Both are accepted: a value
// that starts with a double quote is parsed as a String, any other is the key as
// written. More than one field, an empty key, a key over MaxKeyLength bytes or one with
// characters outside printable ASCII (space to tilde) is refused.
func parseKey(h http.Header) (string, error) {
	vs := h.Values(HeaderIdempotencyKey)
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", fmt.Errorf("%w: the request has %d Idempotency-Key fields, want one", errMalformedKey, len(vs))
	}
	v := strings.TrimSpace(vs[0])
	if strings.HasPrefix(v, `"`) {
		s, err := parseSFString(v)
		if err != nil {
			return "", fmt.Errorf("%w: %v", errMalformedKey, err)
		}
		v = s
	}
	switch {
	case v == "":
		return "", fmt.Errorf("%w: the key is empty", errMalformedKey)
	case len(v) > MaxKeyLength:
		return "", fmt.Errorf("%w: the key is %d bytes, more than %d", errMalformedKey, len(v), MaxKeyLength)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e {
			return "", fmt.Errorf("%w: the key has a character outside printable ASCII at byte %d", errMalformedKey, i)
		}
	}
	return v, nil
}

// parseSFString parses an RFC 8941 String: DQUOTE *(unescaped / "\" ( DQUOTE / "\" ))
// DQUOTE, nothing after it.
func parseSFString(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; c {
		case '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", errors.New(`a string field with a backslash not followed by " or \`)
			}
			b.WriteByte(v[i])
		case '"':
			if i != len(v)-1 {
				return "", errors.New("a string field with characters after its closing quote")
			}
			return b.String(), nil
		default:
			if c < 0x20 || c > 0x7e {
				return "", fmt.Errorf("a string field with the byte %#x", c)
			}
			b.WriteByte(c)
		}
	}
	return "", errors.New("a string field without its closing quote")
}

// errMalformedRun is why run headers were refused.
var errMalformedRun = errors.New("malformed run headers")

// parseRun returns the run and attempt of runonce's headers; ok is false when the request
// carries neither. One without the other, or an attempt that is not a positive integer,
// is refused.
func parseRun(h http.Header) (runID string, attempt int64, ok bool, err error) {
	runID, raw := strings.TrimSpace(h.Get(HeaderRunID)), strings.TrimSpace(h.Get(HeaderAttempt))
	switch {
	case runID == "" && raw == "":
		return "", 0, false, nil
	case runID == "":
		return "", 0, false, fmt.Errorf("%w: %s without %s", errMalformedRun, HeaderAttempt, HeaderRunID)
	case raw == "":
		return "", 0, false, fmt.Errorf("%w: %s without %s", errMalformedRun, HeaderRunID, HeaderAttempt)
	case len(runID) > MaxKeyLength:
		return "", 0, false, fmt.Errorf("%w: %s is %d bytes, more than %d", errMalformedRun, HeaderRunID, len(runID), MaxKeyLength)
	}
	attempt, perr := strconv.ParseInt(raw, 10, 64)
	if perr != nil || attempt < 1 {
		return "", 0, false, fmt.Errorf("%w: %s %q is not a positive integer", errMalformedRun, HeaderAttempt, raw)
	}
	return runID, attempt, true, nil
}
