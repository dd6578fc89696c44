package driver

import (
	"github.com/runonce/runonce/pkg/ledger"
)

// withProgress replaces r's Progress when p is set.
func withProgress(r *ledger.Run, p []byte) {
	if len(p) > 0 {
		r.Progress = p
	}
}
