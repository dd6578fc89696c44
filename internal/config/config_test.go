package config_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/runonce/runonce/internal/config"
)

type settings struct {
	Addr      string
	MaxBody   int64
	Retention time.Duration
	Allow     string
}

func parse(args []string, env map[string]string) (settings, error) {
	var s settings
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&s.Addr, "addr", ":8080", "")
	fs.Int64Var(&s.MaxBody, "max-body", 1<<20, "")
	fs.DurationVar(&s.Retention, "retention", 336*time.Hour, "")
	fs.StringVar(&s.Allow, "allow", "", "")
	_, err := config.Parse(fs, args, env)
	return s, err
}

func TestParse(t *testing.T) {
	t.Parallel()
	def := settings{Addr: ":8080", MaxBody: 1 << 20, Retention: 336 * time.Hour}
	for _, c := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    settings
		wantErr string
	}{
		{name: "defaults", want: def},
		{name: "env", env: map[string]string{"RUNONCE_MAX_BODY": "10", "RUNONCE_RETENTION": "400h", "RUNONCE_ALLOW": "a@b.c"},
			want: settings{Addr: ":8080", MaxBody: 10, Retention: 400 * time.Hour, Allow: "a@b.c"}},
		{name: "flag wins", args: []string{"-max-body", "5"}, env: map[string]string{"RUNONCE_MAX_BODY": "10"},
			want: settings{Addr: ":8080", MaxBody: 5, Retention: 336 * time.Hour}},
		{name: "PORT", env: map[string]string{"PORT": "9090"}, want: settings{Addr: ":9090", MaxBody: 1 << 20, Retention: 336 * time.Hour}},
		{name: "RUNONCE_ADDR wins over PORT", env: map[string]string{"PORT": "9090", "RUNONCE_ADDR": "127.0.0.1:1"},
			want: settings{Addr: "127.0.0.1:1", MaxBody: 1 << 20, Retention: 336 * time.Hour}},
		{name: "flag wins over PORT", args: []string{"-addr", ":1"}, env: map[string]string{"PORT": "9090"},
			want: settings{Addr: ":1", MaxBody: 1 << 20, Retention: 336 * time.Hour}},
		{name: "bad env", env: map[string]string{"RUNONCE_RETENTION": "14d"},
			wantErr: "RUNONCE_RETENTION=\"14d\" (for -retention): want a Go duration such as 90s, 30m or 336h (no days: write 14 days as 336h)"},
		{name: "bad flag", args: []string{"-retention", "14d"}, wantErr: "invalid value \"14d\" for flag -retention: want a Go duration such as 90s"},
		{name: "bad number", env: map[string]string{"RUNONCE_MAX_BODY": "1MB"}, wantErr: "RUNONCE_MAX_BODY=\"1MB\" (for -max-body): want a whole number"},
		{name: "stray argument", args: []string{"oops"}, wantErr: "unexpected arguments"},
		{name: "unknown flag", args: []string{"-colour", "red"}, wantErr: "flag provided but not defined: -colour (t -h lists the flags)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := parse(c.args, c.env)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want %q", err, c.wantErr)
				}
				if code := config.ExitCode(err); code != config.ExitUsage {
					t.Errorf("ExitCode(%v) = %d, want %d: a usage error", err, code, config.ExitUsage)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestParseSources: Parse says where each value came from and which RUNONCE_* variables
// name no flag.
func TestParseSources(t *testing.T) {
	t.Parallel()
	fs := config.NewFlagSet("t", "a test command.")
	fs.SetOutput(io.Discard)
	fs.String("addr", ":8080", "")
	fs.String("ledger", "", "")
	fs.Bool("dev", false, "")
	fs.Int64("max-body", 1, "")
	p, err := config.Parse(fs, []string{"-dev", "-max-body", "3"}, config.Env{
		"PORT": "9393", "RUNONCE_LEDGER": "memory://x", "RUNONCE_LEDGR": "typo", "RUNONCE_STACK_DIR": "/tmp", "HOME": "/root",
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"addr": "PORT", "ledger": "RUNONCE_LEDGER", "dev": "-dev", "max-body": "-max-body"} {
		if got := p.Source(name); got != want {
			t.Errorf("Source(%q) = %q, want %q", name, got, want)
		}
	}
	if diff := cmp.Diff([]string{"RUNONCE_LEDGR", "RUNONCE_STACK_DIR"}, p.Unknown); diff != "" {
		t.Errorf("Unknown (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"RUNONCE_LEDGR (did you mean RUNONCE_LEDGER?)", "RUNONCE_STACK_DIR"}, p.UnknownList()); diff != "" {
		t.Errorf("UnknownList (-want +got):\n%s", diff)
	}
	if fs.Lookup("dev").Value.String() != "true" || fs.Lookup("addr").Value.String() != ":9393" {
		t.Errorf("values: -dev %s, -addr %s", fs.Lookup("dev").Value, fs.Lookup("addr").Value)
	}
}

// TestHelp: -h prints what the command is, every flag with its variable and default,
// and how the environment is read; it returns flag.ErrHelp (Main exits 0 for it).
func TestHelp(t *testing.T) {
	t.Parallel()
	fs := config.NewFlagSet("ingress", "the runonce test ingress.")
	var out strings.Builder
	fs.SetOutput(&out)
	fs.Duration("max-skew", time.Minute, "how far in the future")
	fs.String("addr", ":8080", "listen address")
	_, err := config.Parse(fs, []string{"-h"}, nil)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("Parse(-h) = %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"ingress: the runonce test ingress.", "Usage: ingress [flags]", "-max-skew duration", "RUNONCE_MAX_SKEW",
		"how far in the future (default 1m0s)", "RUNONCE_ADDR", "PORT", "RUNONCE_ + its name in upper snake case", "336h"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-h does not say %q:\n%s", want, out.String())
		}
	}
}

// TestServeHurry: a second signal (Hurry) cuts the grace for in-flight requests short.
func TestServeHurry(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hurry := make(chan struct{})
	ctx, cancel := context.WithCancel(config.WithHurry(t.Context(), hurry))
	served := make(chan error, 1)
	go func() {
		served <- config.Serve(ctx, config.NewServer("", h, slog.New(slog.DiscardHandler)), ln, time.Minute)
	}()
	go http.Get("http://" + ln.Addr().String())
	<-started
	cancel()
	time.Sleep(50 * time.Millisecond)
	begin := time.Now()
	close(hurry)
	select {
	case <-served:
		if d := time.Since(begin); d > 5*time.Second {
			t.Fatalf("Serve returned %s after Hurry", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve still waits for its grace after Hurry")
	}
}

func TestEnvName(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"max-body": "RUNONCE_MAX_BODY", "ledger": "RUNONCE_LEDGER", "oidc-jwks-url": "RUNONCE_OIDC_JWKS_URL"} {
		if got := config.EnvName(in); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCheckRetention(t *testing.T) {
	t.Parallel()
	if err := config.CheckRetention(336*time.Hour, 30*time.Minute); err != nil {
		t.Errorf("default retention refused: %v", err)
	}
	err := config.CheckRetention(7*24*time.Hour, 5*time.Minute)
	if err == nil || !strings.Contains(err.Error(), "message retention") || !strings.Contains(err.Error(), "at least 192h5m0s") {
		t.Errorf("7 days accepted or unexplained: %v", err)
	}
}

func TestSplitList(t *testing.T) {
	t.Parallel()
	if diff := cmp.Diff([]string{"a@x", "b@y"}, config.SplitList(" a@x, ,b@y ,")); diff != "" {
		t.Error(diff)
	}
}

// TestServeDrains: a request in flight when ctx ends is finished before Serve returns.
func TestServeDrains(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		time.Sleep(200 * time.Millisecond)
		w.Write([]byte("done"))
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := config.NewServer(ln.Addr().String(), h, slog.New(slog.DiscardHandler))
	if srv.ReadHeaderTimeout == 0 || srv.MaxHeaderBytes == 0 {
		t.Fatal("server not hardened")
	}
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- config.Serve(ctx, srv, ln, 2*time.Second) }()
	got := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String())
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- string(b)
	}()
	<-started
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if g := <-got; g != "done" {
		t.Fatalf("in-flight request got %q", g)
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{flag.ErrHelp, 0},
		{fmt.Errorf("parse: %w", flag.ErrHelp), 0},
		{errors.New("the ledger is unreachable"), 1},
		{config.Usagef("-ledger is required"), 2},
		{fmt.Errorf("ingress: %w", config.Usagef("-auth %q: want oidc or none", "x")), 2},
	} {
		if got := config.ExitCode(c.err); got != c.want {
			t.Errorf("ExitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

// TestClosest: a misspelt name finds the one it likely misspells; a name far from every
// candidate finds none.
func TestClosest(t *testing.T) {
	t.Parallel()
	flags := []string{"ledger", "topic", "lease", "grace", "max-body", "concurrency", "addr", "auth", "url"}
	for name, want := range map[string]string{
		"ledgr":       "ledger",
		"LEDEGR":      "ledger", // two neighbours swapped
		"max_body":    "max-body",
		"maxbody":     "max-body",
		"concurency":  "concurrency",
		"concurrenyc": "concurrency",
		"topics":      "topic",
		"ulr":         "url",
		"ledger":      "ledger",
		"stack_dir":   "",
		"auth_token":  "",
		"x":           "",
	} {
		if got := config.Closest(name, flags); got != want {
			t.Errorf("Closest(%q) = %q, want %q", name, got, want)
		}
	}
	if got := config.LikelyVariable("RUNONCE_AUTH", []string{"RUNONCE_URL", "RUNONCE_TOKEN"}); got != "" {
		t.Errorf("RUNONCE_AUTH (another command's) likely misspells %q, want none", got)
	}
	if got := config.LikelyVariable("RUNONCE_TOKN", []string{"RUNONCE_URL", "RUNONCE_TOKEN"}); got != "RUNONCE_TOKEN" {
		t.Errorf("RUNONCE_TOKN likely misspells %q, want RUNONCE_TOKEN", got)
	}
}
