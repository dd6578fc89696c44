package ledger

import (
	"encoding/json"
	"fmt"
)

// MaxResult is the largest Result a run stores, in bytes: 16 KiB. It fits every backend's
// record next to the largest payload each accepts (a Firestore document is at most
// 1 MiB with its payload), and it is meant for an answer, not for data: a job whose
// output is larger stores it elsewhere and returns where.
const MaxResult = 16 << 10

// ValidateResult checks a run's result: empty (no result), or a JSON value of at most
// MaxResult bytes.
func ValidateResult(runID string, result []byte) error {
	if len(result) == 0 {
		return nil
	}
	if len(result) > MaxResult {
		return fmt.Errorf("%w: run %s: result is %d bytes, over the %d-byte limit (ledger.MaxResult)", ErrInvalid, runID, len(result), MaxResult)
	}
	if !json.Valid(result) {
		return fmt.Errorf("%w: run %s: result is not valid JSON", ErrInvalid, runID)
	}
	return nil
}

// MaxProgress is the largest Progress a run stores, in bytes: 1 KiB, for counts, not
// lists.
const MaxProgress = 1 << 10
