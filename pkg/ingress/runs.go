package ingress

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/runonce/runonce/pkg/internal/cleantext"
)

const runEffect = "run"

// readyz answers 200 when the ledger and the topic answer, 503 naming what does not.
func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var lerr, perr error
	wg.Go(func() { lerr = h.cfg.Ledger.Ping(ctx) })
	wg.Go(func() { perr = h.cfg.Publisher.Ping(ctx) })
	wg.Wait()
	// Unauthenticated: the answer names what is down, never the backend's error text
	// (hosts, database names); the log has it.
	out := map[string]string{"ledger": "ok", "topic": "ok"}
	status := http.StatusOK
	if lerr != nil {
		out["ledger"], status = "unavailable", http.StatusServiceUnavailable
	}
	if perr != nil {
		out["topic"], status = "unavailable", http.StatusServiceUnavailable
	}
	if status != http.StatusOK {
		out["error"] = "not ready: see the ingress's log"
		h.log.WarnContext(ctx, "not ready", "ledger_error", errText(lerr), "topic_error", errText(perr))
	}
	writeJSON(w, status, out)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return cleantext.Clean(err.Error())
}
