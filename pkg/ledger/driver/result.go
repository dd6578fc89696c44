package driver

import (
	"encoding/json"

	"github.com/runonce/runonce/pkg/ledger"
)

// ValidateProgress checks a run's progress: empty (unchanged), or a JSON value of at
// most ledger.MaxProgress bytes.
func ValidateProgress(runID string, progress []byte) error {
	if len(progress) == 0 {
		return nil
	}
	if len(progress) > ledger.MaxProgress {
		return Invalidf("run %s: progress is %d bytes, over the %d-byte limit (ledger.MaxProgress)", runID, len(progress), ledger.MaxProgress)
	}
	if !json.Valid(progress) {
		return Invalidf("run %s: progress is not valid JSON", runID)
	}
	return nil
}

// withProgress replaces r's Progress when p is set.
func withProgress(r *ledger.Run, p []byte) {
	if len(p) > 0 {
		r.Progress = p
	}
}
