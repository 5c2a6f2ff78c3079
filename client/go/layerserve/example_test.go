package layerserve

// The example command (cmd/layerserve-example) builds and runs against the server.

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// buildExample builds the example command into a temporary directory.
func buildExample(t *testing.T) string {
	t.Helper()
	binary := filepath.Join(t.TempDir(), "layerserve-example")
	// The go that built this test, with its GOPATH environment; the cache makes it quick.
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", binary, "github.com/layerserve/layerserve/client/go/cmd/layerserve-example")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return binary
}

func TestExampleCommand(t *testing.T) {
	binary := buildExample(t)
	out, err := exec.Command(binary, "-target", target).CombinedOutput()
	if err != nil {
		t.Fatalf("example: %v\n%s", err, out)
	}
	for _, want := range []string{"health: SERVING", "model tiny-gemma: gemma, 2 layers, hidden 48",
		"RMSNorm of [2, 8]: max |server - formula| = ", "BlockForward on tiny-gemma: shape [3 48] BFLOAT16"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("example output lacks %q:\n%s", want, out)
		}
	}
}
