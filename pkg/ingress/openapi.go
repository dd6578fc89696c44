package ingress

import (
	_ "embed"
	"net/http"
)

// OpenAPIPath is where the ingress serves its OpenAPI 3.1 description, OpenAPI.
const OpenAPIPath = "/v1/openapi.yaml"

// OpenAPI is the OpenAPI 3.1 description of the ingress's HTTP API (every route but the
// dashboard's pages), in YAML: the document a client is generated from. The ingress
// serves it, unauthenticated, at OpenAPIPath; TestOpenAPIConformance drives every
// operation and status it names against the live handler and validates each request
// and answer with it, and TestOpenAPIRoutes holds it to the routes the handler
// registers, so that it cannot drift from the code.
//
//go:embed openapi.yaml
var OpenAPI []byte

// serveOpenAPI answers the document (application/yaml, RFC 9512).
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/yaml")
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(OpenAPI)
}

// routeMux is an http.ServeMux that remembers the patterns registered on it, so that a
// test can hold them to the OpenAPI document.
type routeMux struct {
	*http.ServeMux
	patterns []string
}

// Handle registers handler for pattern, as http.ServeMux.Handle does.
func (m *routeMux) Handle(pattern string, handler http.Handler) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.Handle(pattern, handler)
}

// HandleFunc registers handler for pattern, as http.ServeMux.HandleFunc does.
func (m *routeMux) HandleFunc(pattern string, handler func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(handler))
}
