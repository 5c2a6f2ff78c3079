package layerserve

// The package's tests share one real layerserve (env LAYERSERVE_SERVER) on 127.0.0.1
// with ports the OS picks, serving the tiny checkpoints of tests/golden/models. Its
// gRPC address comes from the line it prints, as tests/testing/server_process.py reads
// it; after the tests it must drain on SIGTERM and exit 0.

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	// sourceDir is the repository (env LAYERSERVE_SOURCE_DIR).
	sourceDir = os.Getenv("LAYERSERVE_SOURCE_DIR")
	// target is the running server's "host:port".
	target string
)

var grpcLine = regexp.MustCompile(`gRPC listening on (\S+)`)

type serverProcess struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	output strings.Builder // Everything it printed.
	done   chan struct{}   // Closed once it has exited and its output is read.
}

func startServer(args ...string) (*serverProcess, string, error) {
	binary := os.Getenv("LAYERSERVE_SERVER")
	if binary == "" {
		return nil, "", fmt.Errorf("LAYERSERVE_SERVER is not set (the layerserve binary)")
	}
	cmd := exec.Command(binary, append([]string{"--host=127.0.0.1", "--port=0",
		"--metrics-port=0"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	s := &serverProcess{cmd: cmd, done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() { // Reads to the end, so the server never blocks on a full pipe.
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			s.mu.Lock()
			s.output.WriteString(scanner.Text() + "\n")
			s.mu.Unlock()
			if m := grpcLine.FindStringSubmatch(scanner.Text()); m != nil {
				addr <- m[1]
			}
		}
		cmd.Wait()
		close(s.done)
	}()
	select {
	case a := <-addr:
		return s, a, nil
	case <-s.done:
		return nil, "", fmt.Errorf("layerserve exited before listening:\n%s", s.printed())
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		return nil, "", fmt.Errorf("layerserve did not start:\n%s", s.printed())
	}
}

func (s *serverProcess) printed() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.output.String()
}

// stop sends SIGTERM (drain) and returns the exit code: 0 for a clean shutdown.
func (s *serverProcess) stop() int {
	s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.done
	return s.cmd.ProcessState.ExitCode()
}

func TestMain(m *testing.M) {
	if sourceDir == "" {
		fmt.Fprintln(os.Stderr, "LAYERSERVE_SOURCE_DIR is not set (the repository)")
		os.Exit(2)
	}
	server, addr, err := startServer("--model-repository=" +
		filepath.Join(sourceDir, "tests", "golden", "models"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	target = addr
	code := m.Run()
	if exit := server.stop(); exit != 0 {
		fmt.Fprintf(os.Stderr, "layerserve exited %d after SIGTERM, want 0:\n%s", exit, server.printed())
		code = 1
	}
	os.Exit(code)
}
