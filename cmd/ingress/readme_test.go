package main_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runonce/runonce/internal/syncbuf"
)

// TestREADMEQuickStart runs the README's quick start as written against a built
// binary: its command (go run ./cmd/ingress …), the curl it shows (the same one the
// banner prints), posted twice, and the follow-up GET. It fails when the README and the
// program disagree. The liberties: PORT picks a free port, which the README says -dev
// honours on loopback, and the README's 127.0.0.1:8080 is read as that address; and
// RUNONCE_DEV_PUBSUB_PORT=0 puts its in-process Pub/Sub on a free port.
func TestREADMEQuickStart(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := quickStartBlocks(t, string(raw))
	if len(blocks) < 3 {
		t.Fatalf("the README's quick start has %d sh blocks, want the command, the curl and the GET:\n%q", len(blocks), blocks)
	}
	command, postBlock, getBlock := blocks[0], blocks[1], blocks[2]
	args := shellWords(t, command)
	if len(args) < 3 || args[0] != "go" || args[1] != "run" || args[2] != "./cmd/ingress" {
		t.Fatalf("the quick start's first command is %q, want go run ./cmd/ingress …", command)
	}
	const readmeBase = "http://127.0.0.1:8080"

	bin := filepath.Join(t.TempDir(), "ingress")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	port := strings.TrimPrefix(freeAddr(t), "127.0.0.1:")
	cmd := exec.Command(bin, args[3:]...)
	cmd.Dir = dir
	// Its in-process Pub/Sub on a free port too (the default, 8085, may be another -dev's).
	cmd.Env = append(cleanEnv(), "PORT="+port, "RUNONCE_DEV_PUBSUB_PORT=0")
	logs := &syncbuf.Buffer{}
	cmd.Stderr = logs
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	bannerc := make(chan string, 1)
	go func() {
		var b strings.Builder
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "/v1/runs/RUN_ID") {
				break
			}
		}
		bannerc <- b.String()
		io.Copy(io.Discard, stdout)
	}()
	var banner string
	select {
	case banner = <-bannerc:
	case <-time.After(60 * time.Second):
		t.Fatalf("no banner within 60s; logs:\n%s", logs.String())
	}
	base := "http://127.0.0.1:" + port
	if !strings.Contains(banner, "ingress   "+base+"\n") {
		t.Fatalf("the banner does not show %s (the README's quick start with PORT=%s):\n%s", base, port, banner)
	}

	// The README's curl is the banner's, but for the address and the schedule time.
	schedule := regexp.MustCompile(`X-CloudScheduler-ScheduleTime: [0-9TZ:-]+`)
	normal := func(s string) string {
		s = strings.ReplaceAll(s, base, readmeBase)
		s = schedule.ReplaceAllString(s, "X-CloudScheduler-ScheduleTime: T")
		return strings.Join(strings.Fields(s), " ")
	}
	if printed := normal(bannerBlock(banner, "curl -i -X POST")); printed != normal(postBlock) {
		t.Fatalf("the README's curl and the banner's differ:\nREADME: %s\nbanner: %s", normal(postBlock), printed)
	}
	if !strings.Contains(normal(banner), normal(getBlock)) {
		t.Errorf("the banner does not show the README's follow-up %q:\n%s", getBlock, banner)
	}

	// Post it as written, twice.
	first := runCurl(t, postBlock, readmeBase, base)
	if first.status != http.StatusAccepted || first.body["status"] != "queued" || first.header.Get("Location") == "" {
		t.Fatalf("the README's curl answered %d %v (Location %q); the README promises 202, \"status\": \"queued\" and a Location",
			first.status, first.body, first.header.Get("Location"))
	}
	second := runCurl(t, postBlock, readmeBase, base)
	if second.body["duplicate"] != true || second.body["run_id"] != first.body["run_id"] ||
		(second.status != http.StatusAccepted && second.status != http.StatusOK) {
		t.Fatalf("the same curl again answered %d %v; the README promises \"duplicate\": true with 202 or 200", second.status, second.body)
	}

	// Follow it as written.
	id := first.body["run_id"].(string)
	var result any
	deadline := time.Now().Add(30 * time.Second)
	for {
		run := runCurl(t, strings.ReplaceAll(getBlock, "RUN_ID", id), readmeBase, base)
		if run.status != http.StatusOK {
			t.Fatalf("the README's follow-up answered %d %v", run.status, run.body)
		}
		if run.body["status"] == "completed" {
			if run.body["finished_at"] == nil {
				t.Errorf("the completed run has no finished_at, which the README names: %v", run.body)
			}
			res, _ := run.body["result"].(map[string]any)
			if res["greeting"] != "hello, once per run" || res["attempt"] != 1.0 || res["effect_key"] == nil {
				t.Errorf("the completed run's result is %v; the README shows the demo job's greeting, effect_key and attempt 1", run.body["result"])
			}
			result = run.body["result"]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run is %v after 30s; the README says it completes", run.body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), "demo effect"); {
		if time.Now().After(deadline) {
			t.Fatalf("the log does not show the demo job's effect, which the README promises:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	third := runCurl(t, postBlock, readmeBase, base)
	if third.status != http.StatusOK || third.body["duplicate"] != true {
		t.Fatalf("a duplicate of the completed run answered %d %v; the README promises 200 duplicate", third.status, third.body)
	}
	if !reflect.DeepEqual(third.body["result"], result) {
		t.Fatalf("a duplicate of the completed run answered the result %v; the README promises the run's result %v", third.body["result"], result)
	}
}

// quickStartBlocks returns the sh blocks of the README's "## Quick start" section.
func quickStartBlocks(t *testing.T, readme string) []string {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n## Quick start\n")
	if !ok {
		t.Fatal(`README.md has no "## Quick start" section`)
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	var blocks []string
	for {
		_, rest, ok := strings.Cut(section, "```sh\n")
		if !ok {
			return blocks
		}
		block, after, ok := strings.Cut(rest, "```")
		if !ok {
			t.Fatal("an unclosed code block in the quick start")
		}
		blocks = append(blocks, strings.TrimSpace(block))
		section = after
	}
}

// bannerBlock returns the command of the banner that starts with prefix, continuation
// lines included.
func bannerBlock(banner, prefix string) string {
	i := strings.Index(banner, prefix)
	if i < 0 {
		return ""
	}
	var lines []string
	for _, l := range strings.Split(banner[i:], "\n") {
		lines = append(lines, l)
		if !strings.HasSuffix(strings.TrimSpace(l), `\`) {
			break
		}
	}
	return strings.Join(lines, "\n")
}

// shellWords splits a POSIX shell command line: single and double quotes, backslash
// line continuations. Anything fancier fails the test (the README should not need it).
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	s = strings.ReplaceAll(s, "\\\n", " ")
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				t.Fatalf("unclosed ' in %q", s)
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			j := strings.IndexByte(s[i+1:], '"')
			if j < 0 {
				t.Fatalf("unclosed \" in %q", s)
			}
			if w := s[i+1 : i+1+j]; strings.ContainsAny(w, "$`\\") {
				t.Fatalf("the README's command %q needs a shell to expand %q", s, w)
			} else {
				cur.WriteString(w)
			}
			i += j + 1
			inWord = true
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case strings.IndexByte("$`\\|&;<>()*?", c) >= 0:
			t.Fatalf("the README's command %q needs a shell (%q)", s, c)
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

type curlAnswer struct {
	status int
	header http.Header
	body   map[string]any
}

// runCurl runs a curl command line of the README with net/http, reading readmeBase as
// base: the options -i, -X, -H and -d; anything else fails the test.
func runCurl(t *testing.T, command, readmeBase, base string) curlAnswer {
	t.Helper()
	words := shellWords(t, command)
	if len(words) == 0 || words[0] != "curl" {
		t.Fatalf("%q is not a curl command", command)
	}
	method, target, body := "", "", ""
	hasBody := false
	header := http.Header{}
	for i := 1; i < len(words); i++ {
		w := words[i]
		next := func() string {
			if i+1 >= len(words) {
				t.Fatalf("%s needs a value in %q", w, command)
			}
			i++
			return words[i]
		}
		switch {
		case w == "-i", w == "-s", w == "-si":
		case w == "-X":
			method = next()
		case w == "-H":
			k, v, ok := strings.Cut(next(), ":")
			if !ok {
				t.Fatalf("header %q without a colon in %q", words[i], command)
			}
			header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		case w == "-d":
			body, hasBody = next(), true
		case strings.HasPrefix(w, "-"):
			t.Fatalf("the README's curl uses %s, which this test does not know: %q", w, command)
		default:
			target = w
		}
	}
	if method == "" {
		method = http.MethodGet
		if hasBody {
			method = http.MethodPost
		}
	}
	if !strings.HasPrefix(target, readmeBase+"/") {
		t.Fatalf("the README's curl calls %q, not the quick start's %s", target, readmeBase)
	}
	u, err := url.Parse(base + strings.TrimPrefix(target, readmeBase))
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, u.String(), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	if hasBody {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded") // curl -d's
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("%s answered %d, not JSON: %v", command, resp.StatusCode, err)
	}
	return curlAnswer{resp.StatusCode, resp.Header, m}
}

// cleanEnv is the test's environment without the RUNONCE_* variables and PORT, so that
// the command runs as it would in a fresh shell.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RUNONCE_") && !strings.HasPrefix(kv, "PORT=") {
			env = append(env, kv)
		}
	}
	return env
}

// TestHelpAndBadVariable: -h exits 0 with a description of the binary and its
// variables; a variable that does not parse says what the flag wants and exits 2, a
// usage error.
func TestHelpAndBadVariable(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "ingress")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-h")
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ingress -h: %v (want exit 0)\n%s", err, out)
	}
	for _, want := range []string{"ingress: runonce's HTTP ingress", "RUNONCE_LEDGER", "-dev", "PORT"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("ingress -h does not say %q:\n%s", want, out)
		}
	}
	cmd = exec.Command(bin, "-dev")
	cmd.Env = append(cleanEnv(), "RUNONCE_MAX_SKEW=1d")
	out, err = cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 ||
		!strings.Contains(string(out), `RUNONCE_MAX_SKEW="1d" (for -max-skew): want a Go duration such as 90s`) {
		t.Fatalf("RUNONCE_MAX_SKEW=1d: %v\n%s\nwant exit 2 saying what -max-skew wants", err, out)
	}
}
