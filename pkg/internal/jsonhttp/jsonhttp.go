// Package jsonhttp writes the JSON answers of the ingress and the worker, all alike: one
// writer, so that every answer carries the same headers and ends with a newline (a
// terminal's prompt after `curl` starts on a line of its own, and line-oriented tools
// read the answer as one line).
package jsonhttp

import (
	"encoding/json"
	"net/http"
)

// Write answers v as JSON with status: Content-Type application/json, nosniff, no-store,
// and the encoding followed by a newline. A v that cannot be encoded is answered 500
// with an error, and nothing of v is sent.
func Write(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"cannot encode the answer"}`)
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// Error answers {"error": msg} with status.
func Error(w http.ResponseWriter, status int, msg string) {
	Write(w, status, struct {
		Error string `json:"error"`
	}{msg})
}
