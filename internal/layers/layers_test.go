// Package layers_test pins what each public package links, so that a package of pkg/
// does not grow a dependency its users pay for without anyone deciding it: the client
// links no Google Cloud, gRPC, OpenTelemetry SDK or Prometheus package, no production
// package links a test fake, the conformance kit links no database client, and no
// package of pkg/ imports the binaries' internal/ packages.
package layers_test

import (
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/runonce/runonce"

// fakes are the test fakes and test kits no production package may link.
var fakes = []string{
	"testing",
	"net/http/httptest",
	"cloud.google.com/go/pubsub/v2/pstest",
	module + "/pkg/queue/pubsubtest",
	module + "/pkg/queue/memqueue",
	module + "/pkg/targets/targetstest",
	module + "/pkg/ledger/ledgertest",
	module + "/pkg/receiver/receivertest",
	module + "/pkg/benchloop",
}

// telemetry is what the binaries set up and the library leaves to them: the
// OpenTelemetry SDK and exporters, Google's exporters and Prometheus.
var telemetry = []string{
	"go.opentelemetry.io/otel/sdk",
	"go.opentelemetry.io/otel/exporters/",
	"github.com/GoogleCloudPlatform/opentelemetry-operations-go/exporter/",
	"github.com/prometheus/",
}

// databases are the clients of the ledger's backends.
var databases = []string{
	"github.com/jackc/pgx",
	"cloud.google.com/go/firestore",
	"cloud.google.com/go/spanner",
	"github.com/redis/go-redis",
	"modernc.org/sqlite",
}

func TestPackagesLinkOnlyWhatTheyUse(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		pkg    string
		forbid [][]string
	}{
		// The client calls the HTTP API: the standard library, pkg/api and pkg/ledger's
		// types (and so the OpenTelemetry API that pkg/ledger's calls record spans and
		// metrics with). Nothing of Google Cloud, gRPC or the OpenTelemetry SDK.
		{"pkg/client", [][]string{fakes, telemetry, databases, {"cloud.google.com/", "google.golang.org/", module + "/pkg/ingress", module + "/pkg/queue"}}},
		{"pkg/worker", [][]string{fakes, telemetry, databases}},
		{"pkg/ingress", [][]string{fakes, telemetry, databases}},
		{"pkg/queue", [][]string{fakes, telemetry, databases}},
		{"pkg/auth", [][]string{fakes, telemetry, databases}},
		{"pkg/targets", [][]string{fakes, telemetry, databases}},
		{"pkg/receiver", [][]string{fakes, telemetry, databases}},
		// The conformance kit runs against any backend and links none.
		{"pkg/ledger/ledgertest", [][]string{telemetry, databases, {"cloud.google.com/", "google.golang.org/grpc"}}},
	} {
		linked := map[string][]string{} // forbidden prefix -> what links it
		for _, dep := range goList(t, "-deps", module+"/"+c.pkg) {
			for _, forbid := range slices.Concat(c.forbid...) {
				if dep == forbid || strings.HasSuffix(forbid, "/") && strings.HasPrefix(dep, forbid) ||
					!strings.HasSuffix(forbid, "/") && strings.HasPrefix(dep, forbid+"/") {
					linked[forbid] = append(linked[forbid], dep)
				}
			}
		}
		for forbid, deps := range linked {
			t.Errorf("%s links %s (%d packages: %s; go list -deps ./%s): it must not", c.pkg, forbid, len(deps), strings.Join(deps[:min(3, len(deps))], ", "), c.pkg)
		}
	}
}

// TestAPIIsALeaf: the wire types link the standard library, pkg/ledger (with what it
// links itself: the OpenTelemetry API) and the text cleaner of their error messages
// only, so that whatever reads the API (the client, the CLI, a user's program) links no
// server.
func TestAPIIsALeaf(t *testing.T) {
	t.Parallel()
	allowed := []string{module + "/pkg/api", module + "/pkg/internal/cleantext"}
	allowed = append(allowed, goList(t, "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", module+"/pkg/ledger")...)
	for _, dep := range goList(t, "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", module+"/pkg/api") {
		if !slices.Contains(allowed, dep) {
			t.Errorf("pkg/api links %s: it may link the standard library, pkg/ledger and what it links, and pkg/internal/cleantext only", dep)
		}
	}
}

// TestPkgImportsNoInternal: the packages of pkg/ sit below the binaries' internal/
// packages (wiring, observability set-up, the CLI) and never import them; helpers they
// share live in pkg/internal/.
func TestPkgImportsNoInternal(t *testing.T) {
	t.Parallel()
	for _, line := range goList(t, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/pkg/...") {
		pkg, imports, _ := strings.Cut(line, " ")
		for imp := range strings.FieldsSeq(imports) {
			if strings.HasPrefix(imp, module+"/internal/") {
				t.Errorf("%s imports %s: a package of pkg/ must not import internal/", pkg, imp)
			}
		}
	}
}

// goList runs go list with args and returns its non-empty lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
	}
	return slices.DeleteFunc(strings.Split(string(out), "\n"), func(s string) bool { return s == "" })
}
