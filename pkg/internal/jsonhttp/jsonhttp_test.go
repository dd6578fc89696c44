package jsonhttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/runonce/runonce/pkg/internal/jsonhttp"
)

func TestWrite(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		write  func(http.ResponseWriter)
		status int
		body   string
	}{
		{func(w http.ResponseWriter) { jsonhttp.Write(w, 202, map[string]string{"status": "queued"}) }, 202, `{"status":"queued"}` + "\n"},
		{func(w http.ResponseWriter) { jsonhttp.Error(w, 404, "no run") }, 404, `{"error":"no run"}` + "\n"},
		{func(w http.ResponseWriter) { jsonhttp.Write(w, 200, map[string]any{"f": func() {}}) }, 500, `{"error":"cannot encode the answer"}` + "\n"},
	} {
		rec := httptest.NewRecorder()
		c.write(rec)
		if rec.Code != c.status || rec.Body.String() != c.body || rec.Header().Get("Content-Type") != "application/json" ||
			rec.Header().Get("X-Content-Type-Options") != "nosniff" || rec.Header().Get("Cache-Control") != "no-store" {
			t.Errorf("answer %d %q %v; want %d %q with the JSON headers", rec.Code, rec.Body.String(), rec.Header(), c.status, c.body)
		}
	}
}
