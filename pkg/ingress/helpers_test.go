package ingress_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/pstest"

	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/ingress"
	"github.com/runonce/runonce/pkg/ledger"
	_ "github.com/runonce/runonce/pkg/ledger/firestoreledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
	_ "github.com/runonce/runonce/pkg/ledger/postgres"
	"github.com/runonce/runonce/pkg/ledger/sqlite"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/queue/pubsubtest"
)

// backends are the ledgers every ingress test runs against.
var backends = []struct {
	name string
	open func(tb testing.TB, clock func() time.Time) ledger.Driver
}{
	{"memory", func(tb testing.TB, clock func() time.Time) ledger.Driver {
		return memory.New(&memory.Options{Clock: clock})
	}},
	{"sqlite", func(tb testing.TB, clock func() time.Time) ledger.Driver {
		l, err := sqlite.Open(context.Background(), filepath.Join(tb.TempDir(), "runonce.db"), &sqlite.Options{Clock: clock})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { l.Close() })
		return l
	}},
}

// countingLedger counts the ledger calls the ingress makes and can fail them.
type countingLedger struct {
	ledger.Driver
	claims, expedites, gets atomic.Int64
	created                 atomic.Int64
	failClaim               atomic.Pointer[error]
}

func (c *countingLedger) Claim(ctx context.Context, p *ledger.ClaimParams) (*ledger.ClaimResult, error) {
	c.claims.Add(1)
	if e := c.failClaim.Load(); e != nil {
		return nil, *e
	}
	r, err := c.Driver.Claim(ctx, p)
	if err == nil && r.Created {
		c.created.Add(1)
	}
	return r, err
}

func (c *countingLedger) Expedite(ctx context.Context, p *ledger.ExpediteParams) (*ledger.Run, error) {
	c.expedites.Add(1)
	return c.Driver.Expedite(ctx, p)
}

func (c *countingLedger) Get(ctx context.Context, p *ledger.GetParams) (*ledger.Run, error) {
	c.gets.Add(1)
	return c.Driver.Get(ctx, p)
}

func (c *countingLedger) Ping(ctx context.Context) error {
	if e := c.failClaim.Load(); e != nil {
		return *e
	}
	return c.Driver.Ping(ctx)
}

// flakyPublisher wraps the real publisher, counts publishes and can fail them.
type flakyPublisher struct {
	queue.RunPublisher
	publishes atomic.Int64
	fail      atomic.Bool
	// gate, when set, runs before each publish (and may block it).
	gate func()
	mu   sync.Mutex
	msgs []*queue.Message
}

func (f *flakyPublisher) Publish(ctx context.Context, m *queue.Message) (string, error) {
	f.publishes.Add(1)
	if f.gate != nil {
		f.gate()
	}
	if f.fail.Load() {
		return "", errors.Join(queue.ErrUnavailable, errors.New("injected publish failure"))
	}
	f.mu.Lock()
	f.msgs = append(f.msgs, m)
	f.mu.Unlock()
	return f.RunPublisher.Publish(ctx, m)
}

func (f *flakyPublisher) Ping(ctx context.Context) error {
	if f.fail.Load() {
		return errors.Join(queue.ErrUnavailable, errors.New("injected ping failure"))
	}
	return f.RunPublisher.Ping(ctx)
}

type bundle struct {
	led   *countingLedger
	ps    *pubsubtest.InProcess // nil against the emulator
	pub   *flakyPublisher
	h     *ingress.Handler
	srv   *httptest.Server
	now   *fakeClock
	topic string
	ns    string // the handler's namespace
}

type fakeClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

type setupOpts struct {
	backend  int
	cfg      func(*ingress.Config)
	emulator bool
	quiet    bool
	psOpts   []pstest.ServerReactorOption
	// open, when set, replaces backends[backend] (a ledger on a real service).
	open func(tb testing.TB) ledger.Driver
	// namespace replaces the default namespace (unique per test on a shared service).
	namespace string
}

// setup wires a real ledger, a real Pub/Sub (pstest, or the emulator) and the handler
// behind an httptest server.
func setup(tb testing.TB, o setupOpts) *bundle {
	tb.Helper()
	ctx := context.Background()
	clk := &fakeClock{}
	b := &bundle{now: clk, topic: "runs"}
	if o.open != nil {
		b.led = &countingLedger{Driver: o.open(tb)}
	} else {
		b.led = &countingLedger{Driver: backends[o.backend].open(tb, clk.Now)}
	}
	var pub *queue.Publisher
	if o.emulator {
		project := "runonce-test"
		c, err := queue.NewClient(ctx, project, nil)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { c.Close() })
		b.topic = "runs-" + randomSuffix()
		if _, err := queue.EnsureTopic(ctx, c, b.topic); err != nil {
			tb.Fatal(err)
		}
		pub = queue.NewPublisher(c, b.topic, nil)
	} else {
		ps, err := pubsubtest.NewInProcess(ctx, "runonce-test", o.psOpts...)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { ps.Close() })
		if _, err := queue.EnsureTopic(ctx, ps.Client, b.topic); err != nil {
			tb.Fatal(err)
		}
		b.ps = ps
		pub = queue.NewPublisher(ps.Client, b.topic, nil)
	}
	tb.Cleanup(func() { pub.Close() })
	b.pub = &flakyPublisher{RunPublisher: pub}
	var logw io.Writer = io.Discard
	if t, ok := tb.(*testing.T); ok && !o.quiet && testing.Verbose() {
		logw = t.Output()
	}
	cfg := ingress.Config{
		Ledger: ledger.New(b.led, nil), Publisher: b.pub, Namespace: cmpOr(o.namespace, "proj/us-central1"), Auth: auth.None{}, AcceptAnyJob: true,
		Logger: slog.New(slog.NewJSONHandler(logw, nil)), Now: clk.Now,
	}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	h, err := ingress.New(&cfg)
	if err != nil {
		tb.Fatal(err)
	}
	b.h, b.ns = h, cfg.Namespace
	b.srv = httptest.NewServer(h)
	tb.Cleanup(b.srv.Close)
	return b
}

var suffix atomic.Int64

func randomSuffix() string {
	return time.Now().Format("150405.000000") + "-" + string(rune('a'+suffix.Add(1)%26))
}

type reply struct {
	status int
	header http.Header
	body   map[string]any
}

func (b *bundle) do(tb testing.TB, method, path string, hdr map[string]string, body string) reply {
	tb.Helper()
	req, err := http.NewRequest(method, b.srv.URL+path, bytes.NewBufferString(body))
	if err != nil {
		tb.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = append(req.Header[k], v) // as given: not canonicalised
	}
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	r := reply{status: resp.StatusCode, header: resp.Header}
	if err := json.Unmarshal(raw, &r.body); err != nil && resp.Header.Get("Content-Type") == "application/json" {
		tb.Fatalf("%s %s: body %q is not JSON: %v", method, path, raw, err)
	}
	// Every JSON answer ends with a newline (jsonhttp): a terminal's prompt after curl
	// starts on a line of its own.
	if resp.Header.Get("Content-Type") == "application/json" && !bytes.HasSuffix(raw, []byte("\n")) {
		tb.Errorf("%s %s: the JSON answer %q does not end with a newline", method, path, raw)
	}
	return r
}

// published returns the messages the Pub/Sub server stored.
func (b *bundle) published() int {
	if b.ps != nil {
		return len(b.ps.Server.Messages())
	}
	b.pub.mu.Lock()
	defer b.pub.mu.Unlock()
	return len(b.pub.msgs)
}

func requireEmulator(tb testing.TB) {
	tb.Helper()
	if os.Getenv("PUBSUB_EMULATOR_HOST") == "" {
		if os.Getenv("CI") == "true" {
			tb.Fatal("PUBSUB_EMULATOR_HOST is not set under CI=true: start the emulator with scripts/services.sh")
		}
		tb.Skip("set PUBSUB_EMULATOR_HOST to run against the Pub/Sub emulator (scripts/services.sh start DIR)")
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// serviceBackends are the ledgers on real services the end-to-end test also runs against
// when their environment is set: PostgreSQL (TEST_DATABASE_URL) and the Firestore
// emulator (FIRESTORE_EMULATOR_HOST).
func serviceBackends() []struct {
	name string
	open func(tb testing.TB) ledger.Driver
} {
	var out []struct {
		name string
		open func(tb testing.TB) ledger.Driver
	}
	openURL := func(u string) func(tb testing.TB) ledger.Driver {
		return func(tb testing.TB) ledger.Driver {
			l, err := ledger.OpenDriver(context.Background(), u)
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { l.Close() })
			return l
		}
	}
	if dsn := os.Getenv("TEST_DATABASE_URL"); dsn != "" {
		out = append(out, struct {
			name string
			open func(tb testing.TB) ledger.Driver
		}{"postgres", openURL(dsn)})
	}
	if os.Getenv("FIRESTORE_EMULATOR_HOST") != "" {
		out = append(out, struct {
			name string
			open func(tb testing.TB) ledger.Driver
		}{"firestore", openURL("firestore://runonce-test?prefix=ingress" + strings.ReplaceAll(randomSuffix(), ".", "") + "_")})
	}
	return out
}
