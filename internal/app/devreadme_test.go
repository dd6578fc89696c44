package app_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEDemoAgreesWithTheBanner: the README's demo job (its -demo-delay and the
// payloads it names) is the one the banner describes. Before, the README said
// {"sleep": "30s"} and the banner {"sleep":"10s"}.
func TestREADMEDemoAgreesWithTheBanner(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, bullet, _ := strings.Cut(string(raw), "- `demo` is a Go job:")
	bullet, _, _ = strings.Cut(bullet, "\n- ")
	bullet = strings.Join(strings.Fields(bullet), " ")
	delay := regexp.MustCompile("`-demo-delay` \\(([0-9a-z]+)\\)").FindStringSubmatch(bullet)
	payloads := regexp.MustCompile("`(\\{\"[a-z]+\": \"[^\"]+\"\\})`").FindAllStringSubmatch(bullet, -1)
	if delay == nil || len(payloads) != 2 {
		t.Fatalf("the README's demo bullet names no -demo-delay or not two payloads: %s", bullet)
	}
	banner, _ := dev(t, []string{"-addr", freeAddr(t), "-ledger", "memory://dev-readme-demo"}, nil)
	_, line, _ := strings.Cut(banner, "    demo ")
	line, _, _ = strings.Cut(line, "\n")
	if !strings.Contains(line, "works "+delay[1]+",") {
		t.Errorf("the README's -demo-delay is %s; the banner says %q", delay[1], line)
	}
	for _, p := range payloads {
		if !strings.Contains(line, p[1]) {
			t.Errorf("the README names the demo payload %s; the banner says %q", p[1], line)
		}
	}
}
