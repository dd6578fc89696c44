package deploy

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TFLintVersion is the tflint deploy/tools.sh installs and the test expects.
const TFLintVersion = "0.64.0"

// inCI reports whether a missing tool or service must fail rather than skip.
func inCI() bool { return os.Getenv("CI") == "true" }

// tool finds a command on PATH or in GOPATH/bin; missing, it fails the test in CI and
// skips it elsewhere.
func tool(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		p := filepath.Join(strings.TrimSpace(string(out)), "bin", name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if inCI() {
		t.Fatalf("%s is missing (CI=true): run deploy/tools.sh", name)
	}
	t.Skipf("%s is missing: run deploy/tools.sh (CI fails here)", name)
	return ""
}

func run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out.String())
	}
	t.Logf("%s %s: ok\n%s", filepath.Base(name), strings.Join(args, " "), out.String())
}

func TestTerraformFmt(t *testing.T) {
	tf := tool(t, "terraform")
	run(t, ".", tf, "fmt", "-check", "-recursive", "-diff", tfDir())
}

func TestTFLint(t *testing.T) {
	tfl := tool(t, "tflint")
	out, err := exec.Command(tfl, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "version "+TFLintVersion) {
		t.Fatalf("tflint %s is wanted (deploy/tools.sh installs it), found: %s %v", TFLintVersion, out, err)
	}
	abs, err := filepath.Abs(tfDir())
	if err != nil {
		t.Fatal(err)
	}
	// Only the bundled terraform ruleset is enabled: nothing is downloaded.
	run(t, abs, tfl, "--config", filepath.Join(abs, ".tflint.hcl"), "--recursive", "--format", "compact")
}

// TestShellcheck checks every shell script of the repository: *.sh files and files whose
// first line names sh or bash (such as .ci/run).
func TestShellcheck(t *testing.T) {
	sc := tool(t, "shellcheck")
	var scripts []string
	root := ".."
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", ".terraform", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if strings.HasSuffix(p, ".sh") || shebangShell(p) {
			scripts = append(scripts, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(scripts) == 0 {
		t.Fatal("no scripts found")
	}
	run(t, ".", sc, append([]string{"--external-sources"}, scripts...)...)
}

func shebangShell(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadString('\n')
	if !strings.HasPrefix(line, "#!") {
		return false
	}
	fields := strings.Fields(strings.TrimPrefix(line, "#!"))
	for _, f := range fields {
		switch filepath.Base(f) {
		case "sh", "bash", "dash", "ksh":
			return true
		}
	}
	return false
}
