package ingress

import "net/http"

// Patterns returns the patterns the handler's mux registered, in order.
func (h *Handler) Patterns() []string { return append([]string(nil), h.mux.patterns...) }

// Route returns the pattern of the mux's route that serves r ("" for none).
func (h *Handler) Route(r *http.Request) string {
	_, p := h.mux.Handler(r)
	return p
}
