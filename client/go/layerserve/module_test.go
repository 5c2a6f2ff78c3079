package layerserve

// A user's module (CTest go_client_module): a fresh module in a temporary directory,
// outside the tree, that requires this one at its version with a `replace` to the
// checkout (docs/clients/go.md, "Install"), builds the docs' first call and
// the example command in module mode offline, and runs both against the server of
// TestMain. Offline, its dependencies come from Debian's sources through
// debian-vendor.sh, where a user with a proxy gets them from `go get`.

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// firstCall is the Go block of docs/clients/go.md's "The first call", so the docs
// show what this test builds.
func firstCall(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(sourceDir, "docs", "clients", "go.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, found := strings.Cut(string(doc), "\n## The first call\n")
	_, code, inBlock := strings.Cut(section, "\n```go\n")
	code, _, ended := strings.Cut(code, "\n```\n")
	if !found || !inBlock || !ended || !strings.HasPrefix(code, "package main\n") {
		t.Fatal(`docs/clients/go.md has no "## The first call" with a ` + "```go" + ` block of package main`)
	}
	return code + "\n"
}

func TestUserModule(t *testing.T) {
	if os.Getenv("LAYERSERVE_GO_MODULE_TEST") == "" {
		t.Skip("CTest go_client_module runs it (LAYERSERVE_GO_MODULE_TEST=1)")
	}
	checkout := filepath.Join(sourceDir, "client", "go")
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		// Module mode, nothing downloaded, no module cache: what CI has.
		cmd.Env = append(os.Environ(), "GO111MODULE=on", "GOFLAGS=-mod=vendor", "GOPROXY=off",
			"GOWORK=off", "GOMODCACHE="+filepath.Join(dir, "no-module-cache"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	// The go.mod `go get` writes (Go 1.17+ lists every module the build uses): this
	// module, replaced by the checkout, and its requirements, as indirect ones.
	var ours struct {
		Require []struct{ Path, Version string }
	}
	if err := json.Unmarshal([]byte(run(goTool, "mod", "edit", "-json", filepath.Join(checkout, "go.mod"))), &ours); err != nil {
		t.Fatal(err)
	}
	goMod := fmt.Sprintf("module example.com/first-call\n\ngo 1.19\n\nrequire github.com/layerserve/layerserve/client/go v%s\n\nrequire (\n", Version)
	for _, r := range ours.Require {
		goMod += fmt.Sprintf("\t%s %s // indirect\n", r.Path, r.Version)
	}
	write("go.mod", goMod+")\n\nreplace github.com/layerserve/layerserve/client/go => "+checkout+"\n")
	write("main.go", firstCall(t))
	run(filepath.Join(checkout, "debian-vendor.sh"), dir)
	// -trimpath: without it the compiled packages would be keyed in Go's build cache
	// by this temporary directory, and every run would compile grpc-go again.
	run(goTool, "build", "-trimpath", "-o", "bin/first-call", ".")
	run(goTool, "build", "-trimpath", "-o", "bin/layerserve-example",
		"github.com/layerserve/layerserve/client/go/cmd/layerserve-example")
	// Go makes the module cache's directory, but nothing may be in it.
	filepath.Walk(filepath.Join(dir, "no-module-cache"), func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			t.Errorf("the build put %s in the module cache", path)
		}
		return nil
	})

	out := run(filepath.Join(dir, "bin", "first-call"), target)
	x := []float32{1, 2, 3, 4}
	want := make([]float32, len(x))
	for i, v := range x { // RMSNorm with the server's default epsilon 1e-6.
		want[i] = float32(float64(v) / math.Sqrt((1+4+9+16)/4.0+1e-6))
	}
	if wantLine := fmt.Sprintf("RMSNorm: %.4f\n", want); !strings.HasSuffix(out, wantLine) ||
		!strings.Contains(out, " models, the first: tiny-") {
		t.Errorf("first-call printed:\n%s\nwant a model count and %q", out, wantLine)
	}
	out = run(filepath.Join(dir, "bin", "layerserve-example"), "--address", target, "--steps", "3")
	if !exampleSummary("3").MatchString(out) {
		t.Errorf("the example printed:\n%s", out)
	}
}
