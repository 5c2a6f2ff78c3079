package layerserve

// The example command (cmd/layerserve-example) builds and runs against the server:
// the models, a checked RMSNorm and a session of every block of the default model
// with its length checked after each step, then one summary line and exit 0.

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// buildExample builds the example command into a temporary directory.
func buildExample(t *testing.T) string {
	t.Helper()
	binary := filepath.Join(t.TempDir(), "layerserve-example")
	// The go that built this test, in this module's mode (the environment CTest
	// gives); the build cache makes it quick.
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", binary,
		"github.com/layerserve/layerserve/client/go/cmd/layerserve-example")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return binary
}

// exampleSummary is the example's last line for `steps` decode steps on the golden
// models (tiny-gemma is the default, 2 layers).
func exampleSummary(steps string) *regexp.Regexp {
	return regexp.MustCompile(`\nok: \d+ model\(s\), normalize checked, session on tiny-gemma layers 0-1: ` +
		`prefill 4 tokens \+ ` + steps + ` decode steps, length \d+, closed(, median step [0-9.]+ ms)? ` +
		`\(layerserve-go ` + regexp.QuoteMeta(Version) + `\)\n$`)
}

func TestExampleCommand(t *testing.T) {
	binary := buildExample(t)
	out, err := exec.Command(binary, "--address", target, "--steps", "5").CombinedOutput()
	if err != nil {
		t.Fatalf("example: %v\n%s", err, out)
	}
	for _, want := range []string{"model tiny-gemma: gemma, 2 layers, hidden 48",
		"normalize: RMSNorm of [2, 8], max |server - formula| = ", "length 9, closed"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("example output lacks %q:\n%s", want, out)
		}
	}
	if !exampleSummary("5").Match(out) {
		t.Errorf("example output does not end with the summary line:\n%s", out)
	}

	// An error: a message on stderr, a non-zero exit, nothing on stdout past the models.
	cmd := exec.Command(binary, "--address", "127.0.0.1:1", "--timeout", "1s")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != 2 {
		t.Errorf("example against a closed port: %v, want exit 2\nstdout: %s\nstderr: %s", err, stdout, stderr.String())
	}
	if !strings.HasPrefix(stderr.String(), "error: 127.0.0.1:1: ") || len(stdout) != 0 {
		t.Errorf("example against a closed port: stdout %q, stderr %q", stdout, stderr.String())
	}
}
