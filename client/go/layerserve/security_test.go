package layerserve

// Client against secured servers (the real layerserve, each test its own): a bearer
// token from WithToken or WithTokenFile, the server's UNAUTHENTICATED answers to a
// wrong or missing token, health without one, a session carrying it, mutual TLS with
// and without a client certificate, the option errors, and the token in no error or
// output. The PKI and the server's token file come from tests/testing/pki.py.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	pb "github.com/layerserve/layerserve/client/go/gen/layerserve/v1"
)

const (
	// pki.py's two tokens (the server accepts either), and one it does not know.
	testToken  = "s3cret-token-one-0123456789abcdef"
	otherToken = "s3cret-token-two-fedcba9876543210"
	wrongToken = "wrong-token-5555aaaa5555aaaa"
	missingMsg = `missing credentials: this server requires "authorization: Bearer <token>" metadata`
)

// makePKI writes pki.py's files into a temporary directory, with the clients' token
// files: right (with whitespace and CRLF around it), wrong and empty.
func makePKI(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	pki := filepath.Join(sourceDir, "tests", "testing", "pki.py")
	if out, err := exec.Command("/usr/bin/python3", pki, dir).CombinedOutput(); err != nil {
		t.Fatalf("pki.py: %v\n%s", err, out)
	}
	for name, content := range map[string]string{"right": "  " + testToken + "\r\n",
		"wrong": wrongToken + "\n", "empty": "\n \n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// startSecured starts a server for this test only; it must drain and exit 0 after.
func startSecured(t *testing.T, args ...string) string {
	t.Helper()
	server, addr, err := startServer(args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if exit := server.stop(); exit != 0 {
			t.Errorf("layerserve exited %d after SIGTERM, want 0:\n%s", exit, server.printed())
		}
	})
	return addr
}

func dialSecured(t *testing.T, addr string, opts ...grpc.DialOption) *Client {
	t.Helper()
	c, err := Dial(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// assertNoToken fails if any token appears in text (an error or a program's output).
func assertNoToken(t *testing.T, what, text string) {
	t.Helper()
	for _, token := range []string{testToken, otherToken, wrongToken} {
		if strings.Contains(text, token) {
			t.Errorf("%s shows a token:\n%s", what, text)
		}
	}
}

// errorText is err every way it prints.
func errorText(err error) string {
	return fmt.Sprintf("%v\n%+v\n%#v\n%v", err, err, err, status.Convert(err).Proto())
}

func TestTokenServer(t *testing.T) {
	dir := makePKI(t)
	addr := startSecured(t, "--model-repository="+filepath.Join(sourceDir, "tests", "golden", "models"),
		"--auth-token-file="+filepath.Join(dir, "tokens"))
	ctx := context.Background()

	t.Run("right token given or from a file", func(t *testing.T) {
		for _, opt := range []grpc.DialOption{WithToken(testToken), WithToken(otherToken),
			WithTokenFile(filepath.Join(dir, "right"))} {
			models, err := dialSecured(t, addr, opt).ListModels(ctx)
			if err != nil {
				t.Fatalf("%s: %v", opt.(securityOption).name, err)
			}
			if len(models) == 0 {
				t.Errorf("no models")
			}
		}
	})

	t.Run("wrong or missing token is UNAUTHENTICATED with the server's message", func(t *testing.T) {
		for _, c := range []struct {
			opts    []grpc.DialOption
			message string
		}{
			{[]grpc.DialOption{WithToken(wrongToken)}, "invalid bearer token"},
			{[]grpc.DialOption{WithTokenFile(filepath.Join(dir, "wrong"))}, "invalid bearer token"},
			{nil, missingMsg},
		} {
			_, err := dialSecured(t, addr, c.opts...).GetModel(ctx, "")
			if status.Code(err) != codes.Unauthenticated || status.Convert(err).Message() != c.message {
				t.Errorf("got %v, want UNAUTHENTICATED %q", err, c.message)
			}
			assertNoToken(t, "the error", errorText(err))
		}
	})

	t.Run("health answers without a token", func(t *testing.T) {
		for _, opts := range [][]grpc.DialOption{nil, {WithToken(testToken)}} {
			s, err := dialSecured(t, addr, opts...).Health(ctx, "")
			if err != nil || s != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("health: %v %v", s, err)
			}
		}
	})

	t.Run("a session carries the token on every call", func(t *testing.T) {
		client := dialSecured(t, addr, WithTokenFile(filepath.Join(dir, "right")))
		model, err := client.GetModel(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		session, err := client.OpenSession(ctx, &pb.OpenSessionRequest{Model: model.Name,
			NumLayers: model.NumLayers})
		if err != nil {
			t.Fatal(err)
		}
		h := make([]float32, 2*model.HiddenSize)
		out, err := client.BlockForward(ctx, &pb.BlockForwardRequest{Model: model.Name,
			NumLayers: model.NumLayers, SessionId: session.SessionId,
			HiddenStates: MustTensor(h, []int64{1, 2, model.HiddenSize}, f32)})
		if err != nil || out.SessionLength != 2 {
			t.Fatalf("BlockForward in the session: %v, session_length %d", err, out.GetSessionLength())
		}
		if err := client.CloseSession(ctx, session.SessionId); err != nil {
			t.Fatal(err)
		}
		// Without the token the session's calls are refused before they reach it.
		err = dialSecured(t, addr).CloseSession(ctx, session.SessionId)
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("CloseSession without a token: %v", err)
		}
	})

	t.Run("the example takes --token-file and hides a wrong token", func(t *testing.T) {
		binary := buildExample(t)
		out, err := exec.Command(binary, "--address", addr, "--steps", "2", "--token-file", filepath.Join(dir, "right")).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "ok: ") {
			t.Errorf("example with the right token: %v\n%s", err, out)
		}
		out, err = exec.Command(binary, "--address", addr, "--steps", "2", "--token-file", filepath.Join(dir, "wrong")).CombinedOutput()
		if err == nil || !strings.Contains(string(out), ": Unauthenticated: invalid bearer token") {
			t.Errorf("example with a wrong token: %v\n%s", err, out)
		}
		assertNoToken(t, "the example's output", string(out))
	})
}

func TestMutualTLSServer(t *testing.T) {
	dir := makePKI(t)
	file := func(name string) string { return filepath.Join(dir, name) }
	addr := startSecured(t, "--tls-cert="+file("server.crt"), "--tls-key="+file("server.key"),
		"--tls-client-ca="+file("ca.crt"))
	ctx := context.Background()

	t.Run("a client certificate signed by the CA is accepted", func(t *testing.T) {
		client := dialSecured(t, addr, WithTLSFiles(file("ca.crt"), file("client.crt"), file("client.key")))
		if models, err := client.ListModels(ctx); err != nil || len(models) == 0 {
			t.Errorf("ListModels: %v %v", models, err)
		}
	})

	t.Run("no client certificate, or one from another CA, is refused", func(t *testing.T) {
		for _, opt := range []grpc.DialOption{WithTLSFiles(file("ca.crt"), "", ""),
			WithTLSFiles(file("ca.crt"), file("stranger.crt"), file("stranger.key"))} {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := dialSecured(t, addr, opt).ListModels(ctx)
			cancel()
			if status.Code(err) != codes.Unavailable {
				t.Errorf("got %v, want UNAVAILABLE", err)
			}
		}
	})

	t.Run("the example takes --tls-ca, --tls-cert and --tls-key", func(t *testing.T) {
		out, _ := exec.Command(buildExample(t), "--address", addr, "--steps", "2", "--tls-ca", file("ca.crt"),
			"--tls-cert", file("client.crt"), "--tls-key", file("client.key")).CombinedOutput()
		if !strings.Contains(string(out), "ok: ") {
			t.Errorf("example over mutual TLS:\n%s", out)
		}
	})
}

func TestSecurityOptionErrors(t *testing.T) {
	dir := makePKI(t)
	file := func(name string) string { return filepath.Join(dir, name) }
	// Dial fails before connecting: the target need not exist.
	for _, c := range []struct {
		opts []grpc.DialOption
		want string // A regexp for the whole error.
	}{
		{[]grpc.DialOption{WithTLSFiles(file("ca.crt"), file("client.crt"), "")},
			`^layerserve: WithTLSFiles: the client certificate and key go together: certFile given without keyFile$`},
		{[]grpc.DialOption{WithTLSFiles("", "", file("client.key"))}, `keyFile given without certFile$`},
		{[]grpc.DialOption{WithTLSFiles(file("nope.crt"), "", "")},
			`^layerserve: WithTLSFiles: CA file \S+/nope.crt: cannot read it: no such file or directory$`},
		{[]grpc.DialOption{WithTLSFiles("", "", ""), WithTLSFiles(file("ca.crt"), "", "")},
			`^layerserve: Dial: WithTLSFiles and WithTLSFiles both set the TLS: give one$`},
		{[]grpc.DialOption{WithToken(testToken), WithTokenFile(file("right"))},
			`^layerserve: Dial: WithToken and WithTokenFile both set the token: give one$`},
		{[]grpc.DialOption{WithTokenFile(file("nope"))},
			`^layerserve: WithTokenFile \S+/nope: cannot read it: no such file or directory$`},
		{[]grpc.DialOption{WithTokenFile(file("empty"))}, `^layerserve: WithTokenFile \S+/empty: the file is empty$`},
		// pki.py's server file holds both tokens on separate lines: not a client's token.
		{[]grpc.DialOption{WithTokenFile(file("tokens"))},
			`^layerserve: WithTokenFile \S+/tokens: the file must hold one token on one line`},
		{[]grpc.DialOption{WithToken(testToken + "\n")}, `^layerserve: WithToken: the token must be non-empty`},
		{[]grpc.DialOption{WithToken("")}, `^layerserve: WithToken: the token must be non-empty`},
	} {
		client, err := Dial("127.0.0.1:1", c.opts...)
		if err == nil {
			client.Close()
			t.Errorf("Dial succeeded, want %s", c.want)
			continue
		}
		if !regexp.MustCompile(c.want).MatchString(err.Error()) {
			t.Errorf("got %q, want %s", err, c.want)
		}
		assertNoToken(t, "the error", errorText(err))
	}

	out, err := exec.Command(buildExample(t), "--address", "127.0.0.1:1", "--token-file", file("nope")).CombinedOutput()
	if err == nil || !regexp.MustCompile(`error: 127.0.0.1:1: layerserve: WithTokenFile \S+/nope: cannot read it`).Match(out) {
		t.Errorf("example with an unreadable token file: %v\n%s", err, out)
	}
}
